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

from policies.eval_report import Key, QualityTable

# How far ahead of this machine's clock a report's `created` may be (another machine's clock)
# before a maximum age cannot trust it: a date in the future would keep a report young forever.
CLOCK_SKEW = timedelta(hours=1)


def deployed_provider_models(models: Mapping[str, Iterable[str]],
                             deployment_models: Mapping[str, str]) -> dict[str, tuple[str, ...]]:
    """Logical model -> the distinct, sorted provider model strings of its deployments."""
    return {name: tuple(sorted({deployment_models[d] for d in deployments}))
            for name, deployments in models.items()}


def _refusal(key: Key, table: QualityTable, deployed: tuple[str, ...], now: datetime,
             max_age_days: float | None) -> str | None:
    result = table.results[key]
    if result.provider_models is not None and tuple(sorted(set(result.provider_models))) \
            != deployed:
        return (f"the report was made for provider models {list(result.provider_models)}, "
                f"but {key[0]} now deploys {list(deployed)}; run `slorouter eval run` again")
    created = table.created.get(key)
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
    results, refused = dict(table.results), dict(table.refused)
    unchecked = set()
    for key in table.results:
        if key[0] not in deployed:
            continue
        reason = _refusal(key, table, deployed[key[0]], now, max_age_days)
        if reason is not None:
            refused[key] = reason
            del results[key]
        elif table.results[key].provider_models is None:
            unchecked.add(key[0])
    warnings = list(table.warnings)
    if unchecked:
        warnings.append(f"evals of {', '.join(sorted(unchecked))} record no provider models "
                        "(reports written before `eval run` recorded them): not checked against "
                        "the provider models the config deploys; run `slorouter eval run` again "
                        "to check them")
    return replace(table, results=results, refused=refused, warnings=tuple(warnings),
                   version=_with_set_aside(table.version, refused))


def _with_set_aside(version: str, refused: Mapping[Key, str]) -> str:
    """The reports' version, joined by the keys of the results set aside: routing changes when
    a result ages out with the same reports, and so must the policy version that stamps its
    decisions and keys its cached answers. Unchanged when none is."""
    if not refused:
        return version
    keys = "\n".join("\x00".join(key) for key in sorted(refused))
    return f"{version}-{hashlib.sha256(keys.encode()).hexdigest()[:12]}"
