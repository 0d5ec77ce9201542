"""`slorouter policy check` and `slorouter explain`: policy tooling that needs no provider.

`policy check --config FILE` is the CI gate: it exits 1, one line per violation, when a task
can be routed to a model whose eval lower bound is under its quality floor or whose floor has
no eval behind it, and warns (exit unaffected) of rules that can never work as written, such
as a cost ceiling under every deployment's cost for a minimal request.
`explain --config FILE [REQUEST]` prints the routing decision for a chat
completions body (a file or stdin) as JSON, exactly as `POST /v1/route/explain` would.
Without `--config`, both read the embedded default `serve` would start with in this
environment (`router.embedded`): the provider default, narrowed to the providers whose key is
set, or the simulator default (its address stands in: nothing is called).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

CONFIG_HELP = ("the router's YAML config, as `serve --config` takes it (default: the embedded "
               "default `serve` would use here)")


def add_parser(subparsers: argparse._SubParsersAction[Any]) -> None:
    policy = subparsers.add_parser("policy", help="validate policy files")
    actions = policy.add_subparsers(dest="policy_command", required=True)
    check = actions.add_parser("check", help="fail if a route can break its quality floor")
    check.add_argument("--config", type=Path, default=None, help=CONFIG_HELP)
    check.set_defaults(func=policy_check)
    explain = subparsers.add_parser("explain", help="show the routing decision for a request")
    explain.add_argument("--config", type=Path, default=None, help=CONFIG_HELP)
    explain.add_argument("request", nargs="?", type=Path, metavar="FILE",
                         help="file holding a chat completions JSON body (default: stdin)")
    explain.add_argument("--header", action="append", default=[], metavar="NAME:VALUE",
                         type=_header, help="request header, e.g. x-slorouter-task:code")
    explain.set_defaults(func=explain_command)


def _header(text: str) -> tuple[str, str]:
    name, sep, value = text.partition(":")
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(f"expected NAME:VALUE, got {text!r}")
    return name.strip().lower(), value.strip()


def _load(given: Path | None) -> tuple[Path, Any]:
    """The config `--config` names, or the embedded default `serve` would use here, with the
    path that messages name."""
    from policies.loader import PolicyValidationError, load_config_file
    from router import embedded

    path = given if given is not None else embedded.default_file(os.environ)
    # Addresses may use ${VAR}; checking a policy needs none of them to be real.
    try:
        if given is None:
            return path, embedded.default_config(os.environ, unset_stand_in=True)
        return path, load_config_file(path, os.environ, unset_stand_in=True)
    except OSError as err:
        print(f"{path}: cannot read the config: {err.strerror or err}", file=sys.stderr)
        raise SystemExit(2) from None
    except PolicyValidationError as err:
        for problem in err.problems:
            print(f"{path}: {problem}", file=sys.stderr)
        raise SystemExit(2) from None


def policy_check(args: argparse.Namespace) -> int:
    from datetime import UTC, datetime

    from policies.check import (
        ceiling_warnings,
        check_policies,
        ended_experiments,
        policy_warnings,
    )
    from router.errors import ConfigError
    from router.pipeline import DEFAULT_MAX_OUTPUT_TOKENS
    from router.wiring import (
        build_runtime,
        credential_warnings,
        litellm_in_use,
        load_quality,
        output_limit_warnings,
    )

    path, config = _load(args.config)
    base_dir = path.resolve().parent
    try:
        # Everything `serve` resolves at start-up but the secrets' values: prices, learned
        # routers, eval reports, so that a config passing the check also starts.
        runtime, _ = build_runtime(config, _with_placeholder_secrets(config), base_dir)
        quality = load_quality(config, base_dir)
        litellm_in_use(runtime.deployments.values())
    except ConfigError as err:
        print(f"{path}: {err}", file=sys.stderr)
        return 2
    unmeetable = ceiling_warnings(config, runtime.model_facts, _minimal_prompt_tokens(),
                                  DEFAULT_MAX_OUTPUT_TOKENS)
    keyless = credential_warnings(runtime.deployments.values())
    unsized = output_limit_warnings(runtime.deployments.values())
    ended = [f"experiment {name}: its stop ({stop.isoformat()}) has passed, so no request "
             "takes part; move stop or remove it"
             for name, stop in ended_experiments(config, datetime.now(UTC))]
    for warning in (*quality.warnings, *policy_warnings(config, quality), *unmeetable, *keyless,
                    *unsized, *runtime.price_warnings, *ended):
        print(f"{path}: warning: {warning}", file=sys.stderr)
    violations = check_policies(config, quality)
    for violation in violations:
        print(f"{path}: {violation}", file=sys.stderr)
    if violations:
        unset = _unset_names(path)
        if unset:  # a stand-in (1 for a number) may be what failed: `min: ${MATH_FLOOR}`
            print(f"{path}: note: {', '.join(unset)} unset here stood in as 1 where a number is "
                  "wanted, false where a boolean is: a violation naming such a field may be "
                  "the stand-in's; set them as serve will have them", file=sys.stderr)
        print(f"policy check failed: {len(violations)} violation(s)", file=sys.stderr)
        return 1
    print(f"policy check passed ({len(quality.results)} eval results, "
          f"reports version {quality.version}); policy version {runtime.version}"
          f"{_stand_in_caveat(path)}")
    return 0


def _stand_in_caveat(path: Path) -> str:
    """What the printed policy version is worth when `${NAME}`s were unset: they stood in,
    and `serve` hashes their real values where they stand in a routing field."""
    unset = _unset_names(path)
    if not unset:
        return ""
    return (f" (with {', '.join(unset)} unset: serve's differs if one of them is in a "
            "field the version hashes, anything but addresses, keys, Redis URLs and server "
            "settings)")


def _unset_names(path: Path) -> list[str]:
    """The `${NAME}`s of the config at `path` that this environment leaves unset (their
    stand-ins were checked), sorted."""
    from policies.loader import stand_ins

    return sorted(stand_ins(path.read_text(encoding="utf-8"), os.environ))


def _minimal_prompt_tokens() -> int:
    """The prompt tokens the router counts for the smallest request: one empty message."""
    from router.api.body import parse_chat
    from router.pipeline import estimate_prompt_tokens, request_view

    request = parse_chat({"model": "auto", "messages": [{"role": "user", "content": ""}]})
    return estimate_prompt_tokens(request_view(request), request)


def explain_command(args: argparse.Namespace) -> int:
    from router.api.body import parse_chat, parse_json_object
    from router.api.explain import explain_decision
    from router.errors import ConfigError, SlorouterError
    from router.execution.deadline import Deadline
    from router.execution.plan import ExecutionState
    from router.execution.runner import Runner
    from router.pipeline import ChatPipeline
    from router.wiring import build_runtime

    path, config = _load(args.config)
    try:
        runtime, classifier = build_runtime(config, _with_placeholder_secrets(config),
                                            path.resolve().parent)
    except ConfigError as err:
        print(f"{path}: {err}", file=sys.stderr)
        return 2
    try:
        # stdin as bytes: its text layer may read bytes beyond UTF-8 as surrogates (the C
        # locale), which failed later with a traceback instead of this message
        text = (args.request.read_text(encoding="utf-8") if args.request
                else sys.stdin.buffer.read().decode("utf-8"))
    except OSError as err:
        print(f"slorouter explain: cannot read {args.request}: {err.strerror or err}",
              file=sys.stderr)
        return 2
    except UnicodeDecodeError:
        print(f"slorouter explain: {args.request or 'stdin'}: not UTF-8 text", file=sys.stderr)
        return 2
    try:
        raw = parse_json_object(text.encode())  # as the HTTP endpoint reads it
        chat, headers = parse_chat(raw), dict(args.header)
        deadline = Deadline.from_headers(time.perf_counter, runtime.request_timeout_s, headers,
                                         stream=chat.stream)  # as the service would set it
        prepared = ChatPipeline(runtime, classifier, Runner({}, ExecutionState.create())).prepare(
            chat, raw, headers, deadline.expires_at)
    except SlorouterError as err:
        print(f"slorouter explain: {err}", file=sys.stderr)
        return 2
    print(json.dumps(explain_decision(prepared, runtime.model_facts), indent=2))
    return 0


def _with_placeholder_secrets(config: Any) -> dict[str, str]:
    """The environment, with a placeholder for every secret the config references (one of its
    own per variable: two keys must not look like one key given to two tenants)."""
    environ = dict(os.environ)
    for ref in _secret_refs(config):
        name = ref.removeprefix("env:")
        environ[name] = f"placeholder-{name}"
    return environ


def _secret_refs(config: Any) -> list[str]:
    refs = [d.api_key for d in config.deployments if d.api_key]
    return refs + [k.key for k in config.api_keys if k.key]
