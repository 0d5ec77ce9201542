"""Tie eval results to what a config deploys now: a floor is backed only by an eval of the same
provider models, and (optionally) by a report young enough and not dated in the future.

Pure: the deployed provider models per logical model and the clock come in. A result written
before `eval run` recorded its provider models cannot be checked: it still backs floors, and a
warning says so. Used at start-up and by `policy check` (`router.wiring.load_quality`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import replace
from datetime import datetime, timedelta

from policies.eval_report import EvalResult, Key, QualityTable

# How far ahead of this machine's clock a report's `created` may be (another machine's clock)
# before a maximum age cannot trust it: a date in the future would keep a report young forever.
CLOCK_SKEW = timedelta(hours=1)


def deployed_provider_models(models: Mapping[str, Iterable[str]],
                             deployment_models: Mapping[str, str]) -> dict[str, tuple[str, ...]]:
    """Logical model -> the distinct, sorted provider model strings of its deployments."""
    return {name: tuple(sorted({deployment_models[d] for d in deployments}))
            for name, deployments in models.items()}


def _refusal(model: str, result: EvalResult, created: datetime | None,
             deployed: tuple[str, ...], now: datetime, max_age_days: float | None) -> str | None:
    if result.provider_models is not None and tuple(sorted(set(result.provider_models))) \
            != deployed:
        return (f"the report was made for provider models {list(result.provider_models)}, "
                f"but {model} now deploys {list(deployed)}; run `slorouter eval run` again")
    if max_age_days is None or created is None:
        return None
    if created - now > CLOCK_SKEW:
        return (f"the report is dated in the future (created {created.isoformat()}, now "
                f"{now.isoformat(timespec='seconds')}), so its age cannot be checked against "
                f"policies.eval_report_max_age_days {max_age_days:g}")
    if now - created > timedelta(days=max_age_days):
        age = (now - created) / timedelta(days=1)
        return (f"the report is {age:.1f} days old (created {created.isoformat()}), over "
                f"policies.eval_report_max_age_days {max_age_days:g}")
    return None


def bind_to_deployments(table: QualityTable, deployed: Mapping[str, tuple[str, ...]],
                        now: datetime, max_age_days: float | None = None) -> QualityTable:
    """The table with every result that cannot back a floor under this config moved to
    `refused` (its reason naming both provider model lists, or the age), and a warning for the
    results that record no provider models. Results for models the config lacks stay as they
    are (no floor can ask for them)."""
    results, created, refused = dict(table.results), dict(table.created), dict(table.refused)
    unchecked: set[str] = set()
    set_aside: dict[Key, str] = {}  # key -> which of its results backs floors now ("none")
    for key in table.results:
        if key[0] not in deployed:
            continue
        chosen, at, reason = _newest_usable(key, table, deployed[key[0]], now, max_age_days)
        if chosen is None:
            assert reason is not None
            refused[key], set_aside[key] = reason, "none"
            del results[key], created[key]
            continue
        if chosen[0] is not table.results[key]:
            set_aside[key] = f"result {at}"
            results[key] = chosen[0]
            if chosen[1] is not None:
                created[key] = chosen[1]
        if chosen[0].provider_models is None:
            unchecked.add(key[0])
    warnings = list(table.warnings)
    if unchecked:
        warnings.append(f"evals of {', '.join(sorted(unchecked))} record no provider models "
                        "(reports written before `eval run` recorded them): not checked against "
                        "the provider models the config deploys; run `slorouter eval run` again "
                        "to check them")
    return replace(table, results=results, created=created, refused=refused,
                   warnings=tuple(warnings),
                   version=_with_set_aside(table.version, set_aside))


def _newest_usable(key: Key, table: QualityTable, deployed: tuple[str, ...], now: datetime,
                   max_age_days: float | None
                   ) -> tuple[tuple[EvalResult, datetime | None] | None, int, str | None]:
    """The newest of the key's results that can back a floor under this config, and when
    none can, why the newest could not. A report dated in the future (past the clock skew)
    comes after every other: without a maximum age it still backs a floor when no other can,
    but its date no longer hides every later eval of the key (a typo'd 2099 report outranked
    all of them: the evals audit of 2026-12-07), nor does the newest result's refusal (another
    provider model, an age) hide an older one that can back it. Also the chosen result's
    place among the key's results (stable for the same reports), and when none can back it,
    each distinct reason, the newest's first."""
    rows: tuple[tuple[EvalResult, datetime | None], ...] = (
        table.candidates.get(key) or ((table.results[key], table.created.get(key)),))
    future = [created is not None and created - now > CLOCK_SKEW for _, created in rows]
    reasons: list[str] = []
    for at in sorted(range(len(rows)), key=future.__getitem__):  # stable: newest first in each
        result, created = rows[at]
        reason = _refusal(key[0], result, created, deployed, now, max_age_days)
        if reason is None:
            return rows[at], at, None
        reasons.append(reason)
    first, *older = dict.fromkeys(reasons)
    return None, -1, first + "".join(f"; an older report: {r}" for r in older)


def _with_set_aside(version: str, set_aside: Mapping[Key, str]) -> str:
    """The reports' version, joined by the keys whose newest result was set aside and which
    of their results backs floors instead (`none`, or its place): routing changes when a
    result ages out with the same reports, and so must the policy version that stamps its
    decisions and keys its cached answers (the keys alone stayed the same when an older result
    that had taken the newest's place aged out too: the re-audit of 2026-12-07). Unchanged
    when none is."""
    if not set_aside:
        return version
    keys = "\n".join("\x00".join((*key, set_aside[key])) for key in sorted(set_aside))
    return f"{version}-{hashlib.sha256(keys.encode()).hexdigest()[:12]}"
