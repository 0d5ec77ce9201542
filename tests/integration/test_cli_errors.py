"""Operator mistakes at the command line get one clear line and exit status 2, never a Python
traceback: missing files, bad flags, bad environment settings, and configs that `policy check`
must reject because `serve` would."""

from __future__ import annotations

import json
import os
import subprocess
import urllib.request
from pathlib import Path

import pytest

from tests.support.procs import PYTHON
from tests.support.services import MINIMAL_CONFIG as CONFIG
from tests.support.services import start_router

pytestmark = pytest.mark.integration



def _run(tmp_path: Path, *args: str, env: dict[str, str] | None = None,
         stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run([PYTHON, "-m", "router.cli", *args], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path, input=stdin,
                          env={**os.environ, **(env or {})})


def _check_unset(tmp_path: Path, config: str,
                 names: tuple[str, ...]) -> subprocess.CompletedProcess[str]:
    """`policy check` of `config` with `names` unset in its environment."""
    env = {k: v for k, v in os.environ.items() if k not in names}
    return subprocess.run([PYTHON, "-m", "router.cli", "policy", "check", "--config",
                           _config(tmp_path, config)], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path, env=env)


def _config(tmp_path: Path, text: str) -> str:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    return str(path)


def _serve_log_until(tmp_path: Path, text: str, event: str) -> str:
    """`serve`'s start-up log for config `text`, read up to the line naming `event` (or the
    line saying it is starting); the process is then stopped."""
    proc = subprocess.Popen([PYTHON, "-m", "router.cli", "serve", "--config",
                             _config(tmp_path, text), "--port", "0"], cwd=tmp_path,
                            stderr=subprocess.PIPE, text=True)
    lines = []
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append(line)
            if event in line or "starting" in line:
                break
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    return "".join(lines)


def _refused(result: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    for needle in needles:
        assert needle in result.stderr, result.stderr


@pytest.mark.parametrize("command", [["serve", "--config"], ["policy", "check", "--config"],
                                     ["explain", "--config"]])
def test_a_missing_config_file_is_reported_not_raised(tmp_path: Path,
                                                      command: list[str]) -> None:
    _refused(_run(tmp_path, *command, str(tmp_path / "nope.yaml")), "nope.yaml", "cannot read")


@pytest.mark.parametrize("command", [["serve", "--config"], ["policy", "check", "--config"],
                                     ["explain", "--config"]])
def test_a_config_file_that_is_not_utf8_is_reported_not_raised(tmp_path: Path,
                                                               command: list[str]) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes(CONFIG.encode() + "# caf\u00e9\n".encode("latin-1"))
    _refused(_run(tmp_path, *command, str(path)), "latin1.yaml", "not UTF-8 text")


def test_an_explained_request_that_is_not_utf8_is_reported_not_raised(tmp_path: Path) -> None:
    request = tmp_path / "request.json"
    request.write_bytes(b'{"model": "m", "messages": [{"role": "user", "content": "caf\xe9"}]}')
    _refused(_run(tmp_path, "explain", "--config", _config(tmp_path, CONFIG), str(request)),
             "request.json", "not UTF-8 text")


@pytest.mark.parametrize("locale", ["C", "C.UTF-8"])
def test_an_explained_request_on_stdin_that_is_not_utf8_is_reported_not_raised(
        tmp_path: Path, locale: str) -> None:
    """Read from stdin, the same bytes were a traceback (under the C locale Python reads them
    as surrogates, which failed later, when the text was encoded)."""
    result = subprocess.run(
        [PYTHON, "-m", "router.cli", "explain", "--config", _config(tmp_path, CONFIG)],
        capture_output=True, timeout=120, cwd=tmp_path,
        input=b'{"model": "m", "messages": [{"role": "user", "content": "caf\xe9"}]}',
        env={**os.environ, "LC_ALL": locale, "PYTHONUTF8": "0"})
    stderr = result.stderr.decode("utf-8", "replace")
    assert result.returncode == 2 and "Traceback" not in stderr, stderr
    assert "stdin: not UTF-8 text" in stderr, stderr


def test_bad_flags_are_refused_by_the_parser(tmp_path: Path) -> None:
    _refused(_run(tmp_path, "serve", "--log-level", "verbose"), "--log-level")
    config = _config(tmp_path, CONFIG)
    _refused(_run(tmp_path, "explain", "--config", config, "--header", "bogus",
                  stdin='{"model": "m", "messages": [{"role": "user", "content": "hi"}]}'),
             "NAME:VALUE")


@pytest.mark.parametrize("kind", ["under-a-file", "a-file", "database-unopenable"])
def test_an_unusable_cache_directory_is_a_config_error(tmp_path: Path, kind: str) -> None:
    """The OS refusing the directory, and sqlite refusing its database file in it (as in a
    directory the service's user cannot write), are both reported as the setting's fault; a
    file in the way is said to be one (it was mkdir's bare "File exists")."""
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    if kind == "under-a-file":
        directory = blocker / "cache"
    elif kind == "a-file":
        directory = blocker
    else:
        directory = tmp_path / "cache"
        (directory / "cache.db").mkdir(parents=True)  # diskcache's database path is taken
    config = _config(tmp_path, CONFIG + f"server:\n  cache: {{directory: {directory}}}\n")
    said = ("is a file",) if kind != "database-unopenable" else ()
    _refused(_run(tmp_path, "serve", "--config", config, "--port", "1"),
             "server.cache.directory", *said)


def test_a_litellm_model_without_a_known_provider_stops_start_up(tmp_path: Path) -> None:
    """Every call to it would fail: said at start-up, naming the deployment."""
    config = _config(tmp_path, CONFIG.replace("adapter: openai_passthrough",
                                              "adapter: litellm").replace("openai/m", "acme-m"))
    _refused(_run(tmp_path, "serve", "--config", config, "--port", "1"),
             "deployments.d", "acme-m")


def test_a_bad_telemetry_variable_is_a_config_error(tmp_path: Path) -> None:
    config = _config(tmp_path, CONFIG)
    _refused(_run(tmp_path, "serve", "--config", config, "--port", "1",
                  env={"SLOROUTER_TELEMETRY_SAMPLE_RATIO": "10%"}), "sample_ratio")


@pytest.mark.parametrize(("edit", "needle"), [
    (("routes:", "server:\n  cache: {backend: redis}\nroutes:"), "redis_url is required"),
    (("input_price_per_mtok: 1, output_price_per_mtok: 1", "context_window: 1000"),
     "no price"),
    (("routes: {default_model: m}",
      "routes: {default_model: m}\npolicies:\n  default: {candidates: [m], "
      "learned_router: missing-router}"), "learned_router missing-router"),
    (("model: openai/m, adapter: openai_passthrough", "model: acme-m, adapter: litellm"),
     "litellm cannot tell the provider"),
    # litellm's in-process vLLM (the package is not there: every call failed)
    (("model: openai/m, adapter: openai_passthrough", "model: vllm/m, adapter: litellm"),
     "hosted_vllm/m with its api_base"),
    # a vLLM server without its address: litellm sent the prompts to api.openai.com
    (("model: openai/m, adapter: openai_passthrough, api_base: http://127.0.0.1:9/v1",
      "model: hosted_vllm/m, adapter: litellm"), "would send its requests to api.openai.com"),
    (("model: openai/m, adapter: openai_passthrough, api_base: http://127.0.0.1:9/v1",
      "model: azure/gpt-4o, adapter: litellm"),
     "set the deployment's api_base (or AZURE_API_BASE)"),
    (("routes:", "server:\n  stats: {redis_url: 'redis://:p/w@host:6379'}\nroutes:"),
     "server.stats.redis_url"),
    (("routes:", "server: {request_timeout_s: true}\nroutes:"),
     "server.request_timeout_s: expected a number, not the boolean true"),
])
def test_policy_check_rejects_what_serve_would(tmp_path: Path, edit: tuple[str, str],
                                               needle: str) -> None:
    """A config that passes `policy check` also starts: the check resolves prices, learned
    routers and the cache backend as `serve` does (secrets need not be set)."""
    assert edit[0] in CONFIG
    config = _config(tmp_path, CONFIG.replace(*edit))
    _refused(_run(tmp_path, "policy", "check", "--config", config), needle)
    assert _run(tmp_path, "policy", "check", "--config",
                _config(tmp_path, CONFIG)).returncode == 0


def test_every_start_up_problem_is_listed_at_once(tmp_path: Path) -> None:
    """A missing eval report, an unset key variable and a deployment litellm has no price for:
    all three in one run (a missing report used to hide the other two)."""
    text = CONFIG.replace(
        "input_price_per_mtok: 1, output_price_per_mtok: 1}",
        "api_key: env:SLOROUTER_TEST_UNSET_KEY}") + (
        "policies:\n  eval_reports: [missing-evals.json]\n  default: {candidates: [m]}\n")
    config = _config(tmp_path, text)
    result = _run(tmp_path, "serve", "--config", config)
    _refused(result, "missing-evals.json", "SLOROUTER_TEST_UNSET_KEY", "price")
    problems = [line for line in result.stderr.splitlines() if line.startswith("  - ")]
    assert len(problems) >= 3 and all(p.startswith(f"  - {config}: ") for p in problems), \
        problems  # each names the file, as the loader's problems do


def test_a_floor_no_eval_backs_is_said_at_start_up(tmp_path: Path) -> None:
    """A floor with no eval report serves none of its models (every request a 503): `serve`
    starts, as the CI gate is `policy check`, but says so in its log at once."""
    text = CONFIG + "policies:\n  default:\n    candidates: [m]\n" \
                    "    quality_floor: {metric: accuracy, min: 0.8}\n"
    found = _serve_log_until(tmp_path, text, "policy_check_failed")
    assert "policy_check_failed" in found and "model m" in found, found


def test_a_floor_no_eval_backs_lists_the_config_as_degraded(tmp_path: Path) -> None:
    """Started anyway, the router says so in `/readyz` too (`degraded`: config, with the count
    of violations), not only in a log line: it reported ready while every request of the task
    was a 503. The same config with its floor met is not degraded."""
    floored = CONFIG + "policies:\n  default:\n    candidates: [m]\n" \
                       "    quality_floor: {metric: accuracy, min: 0.8}\n"
    for text, degraded in ((floored, True), (CONFIG, False)):
        router = start_router(tmp_path, text, name="degraded" if degraded else "plain")
        try:
            with urllib.request.urlopen(f"{router.base_url}/readyz", timeout=10) as answer:
                ready = json.loads(answer.read())
        finally:
            router.stop()
        assert ("config" in ready["degraded"]) is degraded, ready


def test_policy_check_warns_of_routes_by_task_and_an_ended_experiment(tmp_path: Path) -> None:
    """Both load and pass, and neither works as written: `routes.by_task` beside policies
    routes nothing, and an experiment whose stop has passed assigns no request. `policy check`
    said nothing of either (`serve` only of the experiment); it warns of both, and `serve` logs
    `policy check`'s warnings too."""
    text = CONFIG.replace("routes: {default_model: m}",
                          "routes: {default_model: m, by_task: {code: m}}") + """policies:
  default: {candidates: [m]}
experiments:
  - name: old
    tasks: [chat]
    salt: s1
    stop: 2020-01-01T00:00:00Z
    arms:
      - {name: control, route: "policy:default", control: true, share: 0.5}
      - {name: b, route: "model:m", share: 0.5}
"""
    result = _run(tmp_path, "policy", "check", "--config", _config(tmp_path, text))
    assert result.returncode == 0, result.stderr
    assert "warning: routes.by_task is not used" in result.stderr
    assert "warning: experiment old: its stop (2020-01-01T00:00:00+00:00) has passed" \
        in result.stderr
    found = _serve_log_until(tmp_path, text, "policy_warning")
    assert "routes.by_task is not used" in found, found


def test_policy_check_passes_two_tenants_keys_it_cannot_read(tmp_path: Path) -> None:
    """Secrets are not read by the check: each gets a placeholder of its own (one shared
    placeholder made any two `env:` keys look like one key given to two tenants)."""
    keys = "api_keys:\n  - {key: env:TEAM_A, tenant: a}\n  - {key: env:TEAM_B, tenant: b}\n"
    result = _run(tmp_path, "policy", "check", "--config", _config(tmp_path, CONFIG + keys))
    assert result.returncode == 0, result.stderr


def test_policy_check_passes_unset_placeholders_wherever_the_docs_put_them(
        tmp_path: Path) -> None:
    """`${NAME}` need not be set for the check: a whole Redis URL, a password inside one, a
    base URL with a path after it and a number each get a stand-in of their kind (one http URL
    for all of them made the Redis URLs and the number fail, blaming text no one wrote)."""
    config = "# ${UP_BASE} is the upstream's address (a comment names it first)\n" + CONFIG.replace(
        "api_base: http://127.0.0.1:9/v1", "api_base: '${UP_BASE}/v1'") + (
        "server:\n"
        "  request_timeout_s: ${REQ_TIMEOUT}\n"
        "  idempotency_redis_url: \"redis://:${REDIS_PASSWORD}@127.0.0.1:6390/0\"\n"
        "  cache: {backend: redis, redis_url: \"${CACHE_REDIS_URL}\"}\n")
    result = _check_unset(tmp_path, config,
                          ("UP_BASE", "REQ_TIMEOUT", "REDIS_PASSWORD", "CACHE_REDIS_URL"))
    assert result.returncode == 0, result.stderr
    served = _run(tmp_path, "policy", "check", "--config", _config(tmp_path, config), env={
        "UP_BASE": "http://127.0.0.1:9", "REQ_TIMEOUT": "abc", "REDIS_PASSWORD": "pw",
        "CACHE_REDIS_URL": "redis://127.0.0.1:6391/0"})
    _refused(served, "request_timeout_s")  # a set value is still judged


def test_policy_check_gives_an_unset_whole_value_the_type_its_field_wants(
        tmp_path: Path) -> None:
    """A whole `${NAME}` value stands in as text, a number or a boolean, as its field wants: a
    cache directory, a timeout and a flag, each unset (the number 1 for every whole value made
    `directory: ${CACHE_DIR}` fail, `server.cache.directory: Input should be a valid string`)."""
    config = CONFIG.replace("input_price_per_mtok: 1,", "input_price_per_mtok: 1,\n"
                            "     supports_tools: ${TOOLS_ON},") + (
        "server:\n"
        "  request_timeout_s: ${REQ_TIMEOUT}\n"
        "  cache: {backend: disk, directory: ${CACHE_DIR}}\n")
    result = _check_unset(tmp_path, config, ("TOOLS_ON", "REQ_TIMEOUT", "CACHE_DIR"))
    assert result.returncode == 0, result.stderr
    set_wrong = _run(tmp_path, "policy", "check", "--config", _config(tmp_path, config), env={
        "TOOLS_ON": "maybe", "REQ_TIMEOUT": "5", "CACHE_DIR": "/tmp/c"})
    _refused(set_wrong, "supports_tools")  # a set value is still judged


def test_the_embedded_default_passes_the_check_without_its_simulator_address(
        tmp_path: Path) -> None:
    """Its `${SLOROUTER_SIM_BASE}` is named in a comment before its `api_base` uses it."""
    default = Path(__file__).resolve().parents[2] / "policies" / "defaults" / "simulator.yaml"
    env = {k: v for k, v in os.environ.items() if k != "SLOROUTER_SIM_BASE"}
    result = subprocess.run([PYTHON, "-m", "router.cli", "policy", "check", "--config",
                             str(default)], capture_output=True, text=True, timeout=120,
                            cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stderr


def test_policy_check_prints_the_policy_version_serve_stamps(tmp_path: Path) -> None:
    """The version an operator sees before deploying is the one the started service stamps on
    its decisions, cache keys and telemetry (`/readyz`); with a `${NAME}` unset it says so."""
    result = _run(tmp_path, "policy", "check", "--config", _config(tmp_path, CONFIG))
    assert result.returncode == 0, result.stderr
    printed = result.stdout.rsplit("policy version ", 1)[1].split()[0]
    router = start_router(tmp_path, CONFIG)
    try:
        with urllib.request.urlopen(f"{router.base_url}/readyz", timeout=10) as answer:
            assert json.loads(answer.read())["policy_version"] == printed
    finally:
        router.stop()
    unset = CONFIG.replace("api_base: http://127.0.0.1:9/v1", "api_base: '${UNSET_BASE}/v1'")
    caveated = _check_unset(tmp_path, unset, ("UNSET_BASE",))
    assert caveated.returncode == 0, caveated.stderr
    assert f"policy version {printed} (with UNSET_BASE unset" in caveated.stdout


def test_a_failed_check_names_the_unset_placeholders_that_stood_in(tmp_path: Path) -> None:
    """The embedded default with math's floor written `min: ${MATH_FLOOR}`: unset, it stands
    in as 1 and the check fails on "accuracy >= 1.000"; the failure says MATH_FLOOR was unset
    (it said so only on a pass: the policies audit of 2026-12-07). Set, as serve will have it,
    the check passes."""
    default = Path(__file__).resolve().parents[2] / "policies" / "defaults"
    text = (default / "simulator.yaml").read_text()
    assert text.count("min: 0.70") == 1
    (tmp_path / "simulator-evals.json").write_text((default / "simulator-evals.json").read_text())
    config = text.replace("min: 0.70", "min: ${MATH_FLOOR}")
    failed = _check_unset(tmp_path, config, ("MATH_FLOOR",))
    assert failed.returncode == 1, failed.stderr
    [note] = [line for line in failed.stderr.splitlines() if ": note: " in line]
    assert "MATH_FLOOR" in note and "unset here stood in as 1" in note
    passed = _run(tmp_path, "policy", "check", "--config", _config(tmp_path, config),
                  env={"MATH_FLOOR": "0.7"})
    assert passed.returncode == 0, passed.stderr
