"""Configuration: schema validation, cross-references, interpolation, hashing, resolution."""

from __future__ import annotations

from pathlib import Path

import diskcache
import pytest

from policies.loader import PolicyValidationError, content_hash, load_config_text
from policies.schema import DeploymentSpec, RouterConfig
from policies.yaml_strict import safe_load
from router import embedded
from router.errors import ConfigError
from router.idempotency import Lease, MemoryIdempotencyStore, StoredResponse
from router.runtime_config import key_digest, resolve
from router.wiring import idempotency_store, result_caching

VALID = """
version: 1
deployments:
  - name: a
    model: openai/gpt-4o-mini
    api_key: env:KEY_A
  - name: b
    model: openai/custom
    adapter: openai_passthrough
    api_base: ${BASE}/v1
    input_price_per_mtok: 1
    output_price_per_mtok: 2
models:
  - name: small
    deployments: [a, b]
routes:
  default_model: small
  by_task: {code: small}
api_keys:
  - key: env:CLIENT_KEY
    tenant: acme
    scopes: [write, read]
"""
ENV = {"BASE": "http://127.0.0.1:9", "KEY_A": "sk-a", "CLIENT_KEY": "client-secret"}


def _prices(model: str) -> tuple[float, float] | None:
    return (0.15, 0.6) if model == "openai/gpt-4o-mini" else None


def test_the_policy_version_follows_prices_from_the_price_table() -> None:
    """A deployment priced by litellm's table (no price in the config) routes by that price:
    a litellm upgrade that changes it changes routing, so it changes the policy version (the
    policies audit of 2026-12-07: the first model changed under one version, and cache keys
    are stamped with it)."""
    config = load_config_text(VALID, environ=ENV)
    before = resolve(config, ENV, _prices).version
    assert resolve(config, ENV, _prices).version == before

    def dearer(model: str) -> tuple[float, float] | None:
        return (1.5, 6.0) if model == "openai/gpt-4o-mini" else None

    assert resolve(config, ENV, dearer).version != before


def test_valid_file_loads_and_resolves_prices_secrets_and_keys() -> None:
    """Prices fall back to the price table; secrets come from the environment."""
    runtime = resolve(load_config_text(VALID, environ=ENV), ENV, _prices)
    assert runtime.deployments["a"].input_price_per_mtok == 0.15
    assert runtime.deployments["a"].api_key == "sk-a"
    assert runtime.deployments["b"].api_base == "http://127.0.0.1:9/v1"
    assert runtime.principals[key_digest("client-secret")].scopes == ("read", "write")


def test_every_problem_is_listed_at_once() -> None:
    """Schema errors and dangling references are all reported, not just the first."""
    broken = VALID.replace("adapter: openai_passthrough", "adapter: carrier_pigeon")
    broken = broken.replace("default_model: small", "default_model: huge")
    broken = broken.replace("version: 1", "version: 1\nsurprise: true")
    with pytest.raises(PolicyValidationError) as caught:
        load_config_text(broken, environ=ENV)
    text = " | ".join(caught.value.problems)
    assert "adapter" in text and "surprise" in text
    dangling = VALID.replace("deployments: [a, b]", "deployments: [a, zz]")
    dangling = dangling.replace("by_task: {code: small}", "by_task: {code: nope}")
    with pytest.raises(PolicyValidationError) as caught:
        load_config_text(dangling, environ=ENV)
    assert len(caught.value.problems) == 2


def test_a_failed_item_does_not_also_report_its_list_as_too_short() -> None:
    """An unknown key in the only deployment is one problem: pydantic's derived "Tuple should
    have at least 1 item after validation, not 0" about the list that held it is not another."""
    one = VALID.replace("""  - name: b
    model: openai/custom
    adapter: openai_passthrough
    api_base: ${BASE}/v1
    input_price_per_mtok: 1
    output_price_per_mtok: 2
""", "").replace("deployments: [a, b]", "deployments: [a]")
    broken = one.replace("model: openai/gpt-4o-mini", "model: openai/gpt-4o-mini\n    bogus: 1")
    with pytest.raises(PolicyValidationError) as caught:
        load_config_text(broken, environ=ENV)
    assert caught.value.problems == ["deployments.0.bogus: Extra inputs are not permitted"]
    # An empty list is still too short.
    with pytest.raises(PolicyValidationError) as caught:
        load_config_text(one.replace("deployments: [a]", "deployments: []"), environ=ENV)
    assert any("at least 1 item" in line for line in caught.value.problems)


def test_unknown_task_in_routes_is_rejected() -> None:
    """Route keys must be real task labels."""
    with pytest.raises(PolicyValidationError):
        load_config_text(VALID.replace("{code: small}", "{poetry: small}"), environ=ENV)


def test_missing_placeholder_and_missing_secret_are_named() -> None:
    """An unset ${VAR} or env: secret fails start-up with the variable's name."""
    with pytest.raises(PolicyValidationError, match="BASE"):
        load_config_text(VALID, environ={})
    config = load_config_text(VALID, environ=ENV)
    with pytest.raises(ConfigError) as caught:
        resolve(config, {"BASE": "x"}, _prices)
    assert any("KEY_A" in p for p in caught.value.problems)
    assert any("CLIENT_KEY" in p for p in caught.value.problems)


@pytest.mark.parametrize("empty", ["", "  "])
def test_a_placeholder_set_to_an_empty_value_is_refused(empty: str) -> None:
    """`max_cost_per_request_usd: ${CEILING}` with CEILING set but empty (Compose's `${X}` of
    an unset X) loaded as null: no ceiling, and nothing said. It is refused, naming the
    variable; the same variable set loads."""
    text = VALID + ("policies:\n  default:\n    candidates: [small]\n"
                    "    max_cost_per_request_usd: ${CEILING}\n")
    with pytest.raises(PolicyValidationError) as caught:
        load_config_text(text, environ={**ENV, "CEILING": empty})
    assert caught.value.problems == [
        f"line {text.count(chr(10))}: ${{CEILING}} is set but empty: an empty value would turn "
        "its setting off (null); give it a value, or remove the setting"]
    config = load_config_text(text, environ={**ENV, "CEILING": "0.05"})
    assert config.policies is not None
    assert config.policies.default.max_cost_per_request_usd == 0.05


def test_unknown_price_without_explicit_prices_is_a_config_error() -> None:
    """A model missing from the price table must have prices in the file."""
    text = VALID.replace("    input_price_per_mtok: 1\n    output_price_per_mtok: 2\n", "")
    with pytest.raises(ConfigError, match="input_price_per_mtok"):
        resolve(load_config_text(text, environ=ENV), ENV, _prices)


def test_version_ignores_comments_and_key_order_but_not_content() -> None:
    """The content hash changes with meaning only."""
    base = content_hash(load_config_text(VALID, environ=ENV))
    commented = content_hash(load_config_text("# a comment\n" + VALID, environ=ENV))
    changed = content_hash(load_config_text(VALID.replace("by_task: {code: small}",
                                                          "by_task: {math: small}"), environ=ENV))
    assert base == commented and base != changed
    assert content_hash(load_config_text(VALID, environ=ENV), "classifier-v2") != base


@pytest.mark.parametrize("edit", [
    ("tenant: acme", "tenant: other"),
    ("routes:\n", "server:\n  request_timeout_s: 7\n  cache: {backend: none}\nroutes:\n"),
    ("routes:\n", "telemetry: {exporter: console, sample_ratio: 0.5}\nroutes:\n"),
    ("${BASE}/v1", "http://10.0.0.7:8000/v1"),
    ("env:KEY_A", "env:OTHER_KEY"),
    ("routes:\n", "server:\n  cache: {disk_size_limit_mb: 64}\nroutes:\n"),
    ("routes:\n", "server:\n  idempotency_memory_mb: 16\nroutes:\n"),
    ("routes:\n", "server:\n  idempotency_lease_s: 20\nroutes:\n"),
    ("    api_key: env:KEY_A\n", "    api_key: env:KEY_A\n    timeout_s: 7\n"
     "    connect_timeout_s: 1\n    max_in_flight: 8\n"),
    ("routes:\n", "server:\n  cache: {backend: redis, redis_url: 'redis://h:1/0'}\n"
                   "  stats: {explore_share: 0.1}\n  reliability: {max_retries_per_deployment: 3}"
                   "\nroutes:\n"),
])
def test_version_ignores_sections_that_cannot_change_an_answer(edit: tuple[str, str]) -> None:
    """Who may call, the server's settings and telemetry are not part of the policy version
    (so replicas differing only there share cached answers); the routing part is."""
    assert edit[0] in VALID
    base = content_hash(load_config_text(VALID, environ=ENV))
    edited = load_config_text(VALID.replace(*edit), environ=ENV)
    assert edited.model_dump() != load_config_text(VALID, environ=ENV).model_dump()
    assert content_hash(edited) == base
    moved = VALID.replace("input_price_per_mtok: 1", "input_price_per_mtok: 3")
    assert content_hash(load_config_text(moved, environ=ENV)) != base
    shorter = VALID.replace("routes:\n", "server:\n  cache: {default: {enabled: true, ttl_s: 5}}"
                                          "\nroutes:\n")
    assert content_hash(load_config_text(shorter, environ=ENV)) != base  # a cache rule counts


def test_an_optional_field_added_later_keeps_every_version() -> None:
    """An upgrade that adds an optional field (null unless set) to the config, at the top or
    inside a deployment, leaves the policy version of every config that does not set it, so
    cached answers stay reachable; setting it changes the version. Hashing the nulls changed
    every version (max_output_tokens did)."""
    class LaterDeployment(DeploymentSpec):
        added_later_limit: int | None = None

    class LaterConfig(RouterConfig):
        added_later: str | None = None
        deployments: list[LaterDeployment]  # type: ignore[assignment]

    data = load_config_text(VALID, environ=ENV).model_dump()
    base = content_hash(RouterConfig.model_validate(data))
    assert content_hash(LaterConfig.model_validate(data)) == base
    assert content_hash(LaterConfig.model_validate({**data, "added_later": "x"})) != base
    first = {**data["deployments"][0], "added_later_limit": 5}
    limited = {**data, "deployments": [first, *data["deployments"][1:]]}
    assert content_hash(LaterConfig.model_validate(limited)) != base


def test_the_embedded_default_keeps_its_version_across_restarts() -> None:
    """`slorouter serve` with no keys starts the simulator on a new port each time; the policy
    version (and so every cached answer) must survive that."""
    def version(port: int) -> str:
        environ = {"SLOROUTER_SIM_BASE": f"http://127.0.0.1:{port}", "SLOROUTER_SIM_KEY": "k"}
        return content_hash(embedded.simulator_config(environ))

    assert version(40123) == version(51234)


def test_api_key_needs_exactly_one_form() -> None:
    """A key entry sets either an env reference or a digest, not both or neither."""
    with pytest.raises(PolicyValidationError):
        load_config_text(VALID.replace("  - key: env:CLIENT_KEY\n", "  - tenant_x: 1\n"),
                         environ=ENV)


def test_cached_prompt_tokens_are_billed_at_the_cached_price() -> None:
    """A deployment with a prompt-cache price bills cached prompt tokens at it; without one,
    at the full input price (never more than the prompt)."""
    config = load_config_text(VALID.replace(
        "    input_price_per_mtok: 1\n", "    input_price_per_mtok: 1\n"
        "    cached_input_price_per_mtok: 0.1\n"), environ=ENV)
    runtime = resolve(config, ENV, _prices)
    cached = runtime.deployments["b"]
    assert cached.cost_usd(1_000_000, 0, 600_000) == pytest.approx(0.4 + 0.06)
    plain = runtime.deployments["a"]
    assert plain.cost_usd(1000, 0, 500) == plain.cost_usd(1000, 0, 0)
    assert cached.cost_usd(100, 0, 10_000) == pytest.approx(100 * 0.1e-6)


def test_an_unset_cached_price_follows_the_configured_input_price() -> None:
    """litellm's cached list price is scaled to a configured (contract) input price; with the
    listed input price, or none configured, it is used as listed."""
    contract = load_config_text(VALID.replace("    model: openai/gpt-4o-mini\n",
                                              "    model: openai/gpt-4o-mini\n"
                                              "    input_price_per_mtok: 0.03\n"
                                              "    output_price_per_mtok: 0.12\n"), environ=ENV)
    listed = resolve(contract, ENV, _prices, cached_prices=lambda m: 0.075
                     if m == "openai/gpt-4o-mini" else None).deployments["a"]
    assert listed.cached_input_price_per_mtok == pytest.approx(0.03 * 0.075 / 0.15)
    plain = resolve(load_config_text(VALID, environ=ENV), ENV, _prices,
                    cached_prices=lambda _m: 0.075).deployments
    assert plain["a"].cached_input_price_per_mtok == 0.075  # the listed prices throughout
    assert plain["b"].cached_input_price_per_mtok is None  # no list price to scale by
    writes = resolve(contract, ENV, _prices, write_prices=lambda _m: 0.1875).deployments["a"]
    assert writes.cache_write_price_per_mtok == pytest.approx(0.03 * 1.25)  # 1.25x, scaled


POLICIES = """policies:
  default: {candidates: [small], fallbacks: [small]}
"""


@pytest.mark.parametrize(("edit", "problem"), [
    (("deployments: [a, b]", "deployments: [a, b, a]"),
     "models.small.deployments: deployment 'a' appears 2 times"),
    (("candidates: [small]", "candidates: [small, small]"),
     "policies.default.candidates: model 'small' appears 2 times"),
    (("fallbacks: [small]", "fallbacks: [small, small, small]"),
     "policies.default.fallbacks: model 'small' appears 3 times"),
    (("    scopes: [write, read]\n", "    scopes: [write, read]\n"
      "  - {key: env:CLIENT_KEY, tenant: other}\n"),
     "api_keys: env:CLIENT_KEY appears in entries 0, 1; a key maps to one tenant"),
    (("  - key: env:CLIENT_KEY\n", f"  - key_sha256: {'ab' * 32}\n    tenant: x\n"
      f"  - key_sha256: {'ab' * 32}\n"),
     f"api_keys: key_sha256 {'ab' * 32} appears in entries 0, 1; a key maps to one tenant"),
])
def test_a_name_listed_twice_where_it_would_be_ambiguous_is_refused(
        edit: tuple[str, str], problem: str) -> None:
    """A model's deployments (tried in order), a policy's candidates and fallbacks (orders),
    and client keys (each maps to one tenant) refuse a repeated entry, saying which and where."""
    text = VALID + POLICIES
    assert edit[0] in text
    load_config_text(text, environ=ENV)
    with pytest.raises(PolicyValidationError) as caught:
        load_config_text(text.replace(*edit), environ=ENV)
    assert caught.value.problems == [problem]


def test_repeated_names_are_listed_with_every_other_problem() -> None:
    """Duplicates join the one list of problems: here a repeated deployment and model, a
    repeated candidate in a task's policy, and a dangling route, all at once."""
    text = (VALID + POLICIES + "  tasks:\n    code: {candidates: [small, small]}\n").replace(
        "models:\n  - name: small\n",
        "models:\n  - name: small\n    deployments: [b]\n  - name: small\n").replace(
        "  - name: b\n", "  - name: a\n    model: openai/x\n  - name: b\n").replace(
        "by_task: {code: small}", "by_task: {code: nope}")
    with pytest.raises(PolicyValidationError) as caught:
        load_config_text(text, environ=ENV)
    assert sorted(caught.value.problems) == sorted([
        "deployments: deployment 'a' appears 2 times",
        "models: model 'small' appears 2 times",
        "policies.tasks.code.candidates: model 'small' appears 2 times",
        "routes.by_task.code: unknown model 'nope'",
    ])


def test_one_key_in_two_variables_is_refused_when_secrets_are_resolved() -> None:
    """Two entries whose variables hold the same key, or a key and another entry's digest of
    it, would map one key to two tenants: refused at start-up, naming both entries and no
    secret."""
    twice = VALID + "  - {key: env:OTHER_KEY, tenant: other}\n"
    with pytest.raises(ConfigError) as caught:
        resolve(load_config_text(twice, environ=ENV), {**ENV, "OTHER_KEY": "client-secret"},
                _prices)
    assert caught.value.problems == ["api_keys[1] (env:OTHER_KEY): the same key as api_keys[0] "
                                     "(env:CLIENT_KEY); a key maps to one tenant"]
    assert "client-secret" not in str(caught.value)
    digest = VALID + f"  - {{key_sha256: {key_digest('client-secret')}, tenant: other}}\n"
    with pytest.raises(ConfigError, match=r"api_keys\[1\] \(key_sha256\): the same key as"):
        resolve(load_config_text(digest, environ=ENV), ENV, _prices)
    distinct = resolve(load_config_text(twice, environ=ENV), {**ENV, "OTHER_KEY": "o"}, _prices)
    assert len(distinct.principals) == 2


@pytest.mark.parametrize(("edit", "key"), [
    (("  tasks:\n", "  tasks:\n    code: {candidates: [small]}\n    code: {candidates: [small]}\n"),
     "code"),
    (("fallbacks: [small]}", "fallbacks: [small], objective: min_cost, objective: min_cost}"),
     "objective"),
    (("routes:\n", "routes:\n  default_model: small\n"), "default_model"),
])
def test_a_mapping_key_written_twice_is_refused_with_its_lines(
        edit: tuple[str, str], key: str) -> None:
    """YAML keeps the last of two equal keys without a word: a task policy written twice, or a
    setting given twice in one block, would run with one of them silently dropped."""
    text = VALID + POLICIES + "  tasks:\n    chat: {candidates: [small]}\n"
    assert edit[0] in text
    load_config_text(text, environ=ENV)
    with pytest.raises(PolicyValidationError) as caught:
        load_config_text(text.replace(*edit, 1), environ=ENV)
    [problem] = caught.value.problems
    assert problem.startswith("line ") and f"not valid YAML: found duplicate key {key!r}" in problem
    assert "first at line" in problem


@pytest.mark.parametrize("date", ["2027-13-45T00:00:00Z", "2027-02-30"])
def test_a_date_that_does_not_exist_is_a_yaml_problem_naming_its_line(date: str) -> None:
    """PyYAML builds a date from any scalar shaped like one and raised the calendar's own
    `ValueError` for one that does not exist (an experiment's `start` on 30 February), which
    ended `policy check` and `serve` with a traceback."""
    text = VALID + f"note: {date}\n"
    with pytest.raises(PolicyValidationError) as caught:
        load_config_text(text, environ=ENV)
    [problem] = caught.value.problems
    assert problem.startswith("line ") and "not valid YAML" in problem
    assert f"{date!r} is not a date" in problem
    assert f"line {text.count(chr(10))}" in problem


def test_merge_keys_still_override_as_yaml_intends() -> None:
    """`<<: *anchor` then a key of its own is an override, not a duplicate."""
    text = VALID + POLICIES.replace("  default: {", "  default: &base {") + (
        "  tasks:\n    code:\n      <<: *base\n      objective: min_latency\n")
    config = load_config_text(text, environ=ENV)
    assert config.policies is not None
    assert config.policies.tasks["code"].objective == "min_latency"


@pytest.mark.parametrize("url", ["http://127.0.0.1:6379", "not a url",
                                 "redis://:s3cr3tPW/xyz@127.0.0.1:6379/0",
                                 "redis://:hunter2?x@127.0.0.1:6379/0"])
def test_a_redis_url_redis_cannot_read_is_a_config_problem_that_hides_it(url: str) -> None:
    """Checked at load, so `policy check` refuses it as `serve` would (redis-py raised at
    start-up, printing the part of an unencoded password before its `/` or `?`); the message
    never repeats the URL."""
    config = VALID + f"server:\n  stats: {{redis_url: '{url}'}}\n"
    with pytest.raises(PolicyValidationError) as caught:
        load_config_text(config, environ=ENV)
    (problem,) = caught.value.problems
    assert problem.startswith("server.stats.redis_url: ") and "Redis URL" in problem
    assert "s3cr3t" not in problem and "hunter2" not in problem
    fine = VALID + "server:\n  stats: {redis_url: 'redis://:p%2Fw@127.0.0.1:6379/0'}\n"
    assert load_config_text(fine, environ=ENV).server.stats.redis_url is not None


@pytest.mark.parametrize("path", ["/x3", "/3/", "/-1", "/0/extra"])
def test_a_redis_url_whose_database_is_not_a_number_is_a_config_problem(path: str) -> None:
    """redis-py reads a path that is not a number as database 0: two environments kept apart
    by their database number, one of them with a typo, shared a cache and idempotency records."""
    config = VALID + f"server:\n  stats: {{redis_url: 'redis://:s3cr3t@127.0.0.1:6379{path}'}}\n"
    with pytest.raises(PolicyValidationError) as caught:
        load_config_text(config, environ=ENV)
    (problem,) = caught.value.problems
    assert problem.startswith("server.stats.redis_url: ") and "database" in problem
    assert "s3cr3t" not in problem
    for fine in ("", "/", "/0", "/15"):
        text = VALID + f"server:\n  stats: {{redis_url: 'redis://127.0.0.1:6379{fine}'}}\n"
        assert load_config_text(text, environ=ENV).server.stats.redis_url is not None


def test_infinite_prices_and_timeouts_are_refused() -> None:
    """`.inf` is no price or timeout (it summed to +Inf in the cost metrics)."""
    config = VALID.replace("output_price_per_mtok: 2", "output_price_per_mtok: .inf") + \
        "server:\n  request_timeout_s: .inf\n"
    with pytest.raises(PolicyValidationError) as caught:
        load_config_text(config, environ=ENV)
    assert len(caught.value.problems) == 2
    assert all("finite" in problem for problem in caught.value.problems)


@pytest.mark.parametrize("value", ["sk-a\n", " sk-a", "sk a", " ", "sk-\x00a"])
def test_a_key_with_whitespace_or_control_characters_is_refused_at_start_up(
        value: str) -> None:
    """A secret file's trailing newline made every request fail before it left (and an action
    was reported as an unknown commit); a client key with one locked its tenant out. Refused,
    naming the variable, never the value."""
    for env in ({**ENV, "KEY_A": value}, {**ENV, "CLIENT_KEY": value}):
        with pytest.raises(ConfigError) as caught:
            resolve(load_config_text(VALID, environ=env), env, _prices)
        (problem,) = caught.value.problems
        assert "whitespace or control characters" in problem
        assert value.strip() not in problem or not value.strip()


@pytest.mark.parametrize("value", ["sk-clé-ünïcode-key", "sk-key-\U0001f511-team"])
def test_a_key_beyond_ascii_is_refused_at_start_up(value: str) -> None:
    """A client key with a letter beyond ASCII started the router and could then authenticate
    no request (the `openai` client cannot send it; curl's UTF-8 bytes were read as Latin-1);
    a provider key alike could never be sent. Refused, naming the variable, never the value."""
    for env in ({**ENV, "KEY_A": value}, {**ENV, "CLIENT_KEY": value}):
        with pytest.raises(ConfigError) as caught:
            resolve(load_config_text(VALID, environ=env), env, _prices)
        (problem,) = caught.value.problems
        assert "beyond ASCII" in problem and value not in problem


def test_a_model_arm_needs_policies_to_narrow() -> None:
    """Without `policies` every request takes the routes' default, so a `model:` arm could
    never serve (it was reported degraded on every request)."""
    config = VALID + _two_arms("e1", "model:small")
    with pytest.raises(PolicyValidationError) as caught:
        load_config_text(config, environ=ENV)
    (problem,) = caught.value.problems
    assert problem.startswith("experiments.e1.arms.b.route:") and "policies" in problem



def _experiment_yaml(name: str, unit: str, tasks: str, dates: str = "") -> str:
    return f"""  - name: {name}
    tasks: [{tasks}]
    unit: {unit}
    salt: s-{name}{dates}
    arms:
      - {{name: control, route: "policy:default", control: true, share: 0.5}}
      - {{name: other, route: "policy:default", share: 0.5}}
"""


def test_an_experiment_no_request_could_join_is_refused() -> None:
    """A request joins the first running experiment for its task that has its unit id, so a
    second experiment on that task with the same unit (or after one on `request` or `tenant`,
    which every request carries) at the same time never gets a request: refused, naming both
    and the task. It used to load and report zero requests for the second one."""
    cases = [("user", "user", "chat"), ("request", "session", "chat, code"),
             ("tenant", "user", "chat")]
    for first_unit, second_unit, tasks in cases:
        config = VALID + "experiments:\n" + _experiment_yaml("first", first_unit, tasks) + \
            _experiment_yaml("second", second_unit, "summarization, chat")
        with pytest.raises(PolicyValidationError) as caught:
            load_config_text(config, environ=ENV)
        (problem,) = caught.value.problems
        assert problem.startswith("experiments.second.tasks: ['chat']") and "'first'" in problem
    # Another unit that not every request carries (anonymous requests go to the second), or
    # dates that do not overlap, leave the second experiment its requests: both load.
    for first, second in (
        (_experiment_yaml("first", "user", "chat"), _experiment_yaml("second", "session", "chat")),
        (_experiment_yaml("first", "user", "chat", "\n    stop: 2027-01-01T00:00:00Z"),
         _experiment_yaml("second", "user", "chat", "\n    start: 2027-01-01T00:00:00Z")),
    ):
        loaded = load_config_text(VALID + "experiments:\n" + first + second, environ=ENV)
        assert [e.name for e in loaded.experiments] == ["first", "second"]

def test_one_field_of_a_pool_or_budget_can_be_changed_alone() -> None:
    """The reference shows the pools' and budgets' defaults: overriding one field keeps the
    section's other defaults (it was "Field required" for each of them)."""
    config = VALID + """server:
  reliability:
    interactive: {max_concurrency: 8}
    retry_budget: {share: 0.3}
"""
    reliability = load_config_text(config, environ=ENV).server.reliability
    assert (reliability.interactive.max_concurrency, reliability.interactive.max_queue,
            reliability.interactive.max_queue_wait_s) == (8, 128, 2.0)
    assert (reliability.retry_budget.share, reliability.retry_budget.floor_per_s) == (0.3, 1.0)
    assert reliability.background.max_concurrency == 16


@pytest.mark.parametrize("form", ["${BASE:-http://10.0.0.7:8000}", "${BASE", "${ BASE }",
                                  "${base-url}"])
def test_a_placeholder_form_that_is_not_substituted_is_refused_by_its_line(form: str) -> None:
    """Only `${NAME}` is substituted; any other `${...}` (a shell default, a typo) used to stay
    in the config as literal text, an address no upstream answers. It is refused, naming the
    line, never the text (which may hold a credential)."""
    text = VALID.replace("${BASE}", form, 1)
    line = text.splitlines().index(next(row for row in text.splitlines() if form in row)) + 1
    with pytest.raises(PolicyValidationError) as caught:
        load_config_text(text, environ=ENV)
    assert caught.value.problems == [
        f"line {line}: only ${{NAME}} is substituted (a name of letters, digits and "
        "underscores; no default, no other shell form)"]
    assert not any("10.0.0.7" in problem for problem in caught.value.problems)


@pytest.mark.parametrize("query,named", [
    ("socket_timeout=abc", "has an option redis-py cannot read (Invalid value for "
                           "'socket_timeout' in connection URL)"),
    ("sockettimeout=1", "has query options redis-py does not take: sockettimeout"),
])
def test_a_redis_url_option_redis_cannot_take_is_a_config_problem(query: str,
                                                                 named: str) -> None:
    """An option value redis-py cannot read made `serve` exit with a traceback after `policy
    check` had passed it; an option no connection takes failed at the first connection. Both are
    refused at load, naming the option, never the password."""
    config = VALID + f"server:\n  stats: {{redis_url: 'redis://:s3cr3t@127.0.0.1:6379/0?{query}'}}\n"
    with pytest.raises(PolicyValidationError) as caught:
        load_config_text(config, environ=ENV)
    assert caught.value.problems == [f"server.stats.redis_url: Value error, {named}"]
    for fine in ("socket_timeout=0.5&health_check_interval=10", "client_name=router"):
        text = VALID + f"server:\n  stats: {{redis_url: 'redis://127.0.0.1:6379/0?{fine}'}}\n"
        assert load_config_text(text, environ=ENV).server.stats.redis_url is not None
    secure = VALID + "server:\n  stats: {redis_url: 'rediss://h:6380/0?ssl_cert_reqs=none'}\n"
    assert load_config_text(secure, environ=ENV).server.stats.redis_url is not None


def test_the_disk_caches_size_limit_is_the_configured_one(tmp_path: Path) -> None:
    """`server.cache.disk_size_limit_mb` bounds the disk cache (it was a fixed 1 GiB, neither
    documented nor configurable); diskcache keeps the setting in its directory."""
    directory = tmp_path / "cache"
    text = VALID + f"server:\n  cache: {{directory: '{directory}', disk_size_limit_mb: 64}}\n"
    result_caching(load_config_text(text, environ=ENV))
    with diskcache.Cache(str(directory)) as stored:
        assert stored.size_limit == 64 * 1024 * 1024
    with pytest.raises(PolicyValidationError):
        load_config_text(VALID + "server:\n  cache: {disk_size_limit_mb: 0}\n", environ=ENV)


async def test_the_idempotency_stores_memory_budget_is_the_configured_one() -> None:
    """`server.idempotency_memory_mb` bounds the in-process Idempotency-Key records (it was a
    constructor default of 128 MiB, not configurable): 40 answers of 100 KB fill 1 MB."""
    store = idempotency_store(load_config_text(VALID + "server:\n  idempotency_memory_mb: 1\n",
                                               environ=ENV))
    assert isinstance(store, MemoryIdempotencyStore)
    for number in range(40):
        lease = await store.claim("tenant", f"key-{number}", "f" * 64, wait_s=0.0, lease_s=30.0)
        assert isinstance(lease, Lease)
        assert await store.complete(lease, StoredResponse(200, (), b"x" * 100_000))
        assert store.bytes_held <= 1 << 20
    assert 0 < len(store) < 40
    with pytest.raises(PolicyValidationError):
        load_config_text(VALID + "server:\n  idempotency_memory_mb: 0\n", environ=ENV)


@pytest.mark.parametrize(("setting", "where", "expected"), [
    ("server: {request_timeout_s: true}", "server.request_timeout_s",
     "expected a number, not the boolean true"),
    ("server: {reliability: {interactive: {max_concurrency: false}}}",
     "server.reliability.interactive.max_concurrency", "expected a number, not the boolean false"),
    ("policies: {default: {candidates: [small], max_cost_per_request_usd: yes}}",
     "policies.default.max_cost_per_request_usd", "expected a number, not the boolean true"),
    ("server: {cache: {default: {enabled: 1}}}", "server.cache.default.enabled",
     "expected true or false, not a number"),
    ("server: {cache: {default: {enabled: 'yes'}}}", "server.cache.default.enabled",
     "expected true or false, not other text"),
    ("telemetry: {prometheus: 0}", "telemetry.prometheus", "expected true or false, not a number"),
    ("experiments: [{name: e, salt: s, tasks: [chat], arms: [{name: a, route: 'policy:default', "
     "share: 0.5, control: true}, {name: b, route: 'model:small', share: 0.5}], "
     "metrics: [{name: x, range: [true, 1]}]}]\npolicies: {default: {candidates: [small]}}",
     "experiments.0.metrics.0.range", "expected a number, not the boolean true"),
])
def test_numbers_and_booleans_are_not_read_as_one_another(setting: str, where: str,
                                                          expected: str) -> None:
    """pydantic's lax mode read `true` as 1 (a one-second timeout) and 1 or "yes" as true."""
    with pytest.raises(PolicyValidationError) as caught:
        load_config_text(VALID + setting + "\n", environ=ENV)
    assert caught.value.problems == [f"{where}: {expected}"]


def test_a_crossed_number_or_boolean_hides_no_other_problem() -> None:
    """Every problem at once, as the config pages promise: a crossed field stopped the
    validation of its model, and every problem beside it or under it was found only once it
    was mended, one restart each."""
    setting = ("server: {request_timeout_s: true, max_body_bytes: abc, bogus: 1, "
               "cache: {default: {enabled: 1, ttl_s: -5}}}\n")
    with pytest.raises(PolicyValidationError) as caught:
        load_config_text(VALID + setting, environ=ENV)
    problems = caught.value.problems
    assert "server.request_timeout_s: expected a number, not the boolean true" in problems
    assert "server.cache.default.enabled: expected true or false, not a number" in problems
    assert {p.split(":")[0] for p in problems} == {
        "server.request_timeout_s", "server.max_body_bytes", "server.bogus",
        "server.cache.default.enabled", "server.cache.default.ttl_s"}, problems


def test_numbers_and_booleans_from_the_environment_still_load() -> None:
    """`${NAME}` is replaced before YAML reads the text: unquoted it is a YAML number or
    boolean, quoted it is text, and numbers and true/false written as text still load."""
    text = VALID + ("server:\n  request_timeout_s: ${TIMEOUT}\n  max_body_bytes: '${BODY}'\n"
                    "  shutdown_grace_s: 10\n  cache:\n    disk_size_limit_mb: 64\n"
                    "    default: {enabled: '${CACHE_ON}', ttl_s: ${TTL}}\n"
                    "    prefix_affinity: ${AFFINITY}\n")
    config = load_config_text(text, environ={**ENV, "TIMEOUT": "2.5", "BODY": "1024",
                                             "CACHE_ON": "true", "TTL": "60",
                                             "AFFINITY": "false"})
    server = config.server
    assert (server.request_timeout_s, server.max_body_bytes, server.cache.default.enabled,
            server.cache.default.ttl_s, server.cache.prefix_affinity,
            server.cache.disk_size_limit_mb) == (2.5, 1024, True, 60.0, False, 64.0)


def test_the_version_written_as_text_loads_as_other_numbers_do() -> None:
    """`version: "1"` (a quoted `"${CONFIG_VERSION}"`) was refused, `Input should be 1`, where
    every other number written as text loads; another version, or a boolean, is still a
    problem naming the field."""
    for written in ('"1"', "'${CONFIG_VERSION}'"):
        text = VALID.replace("version: 1", f"version: {written}")
        assert load_config_text(text, environ={**ENV, "CONFIG_VERSION": "1"}).version == 1
    for written, problem in (('"2"', "version: Input should be 1"),
                             ("true", "version: expected a number, not the boolean true"),
                             ('"one"', "version: Input should be 1")):
        with pytest.raises(PolicyValidationError) as caught:
            load_config_text(VALID.replace("version: 1", f"version: {written}"), environ=ENV)
        assert caught.value.problems == [problem], caught.value.problems


def test_a_name_or_key_reference_out_of_pattern_says_what_is_expected_not_the_regex() -> None:
    """A Persian deployment name and a client key written inline were refused with pydantic's
    regular expression (`String should match pattern '^[A-Za-z0-9]…'`); the problem now says
    what a name or a key reference is, and never quotes the value (a key written inline is a
    secret)."""
    broken = VALID.replace("  - name: a\n", "  - name: مدل\n").replace(
        "deployments: [a, b]", "deployments: [مدل, b]").replace("key: env:CLIENT_KEY",
                                                                "key: sk-inline-secret-1")
    with pytest.raises(PolicyValidationError) as caught:
        load_config_text(broken, environ=ENV)
    problems = caught.value.problems
    assert "deployments.0.name: not a name: 1-128 ASCII letters, digits and . _ : / -, " \
           "starting with a letter or a digit" in problems
    assert "api_keys.0.key: not an environment variable reference, env:NAME (a key is never " \
           "written in the file itself)" in problems
    assert not any("pattern" in p or "sk-inline-secret-1" in p for p in problems), problems


def test_a_setting_no_section_has_is_answered_with_the_one_it_resembles() -> None:
    """`max_cost_per_request` (the `_usd` left off) and `output_price_per_mtk` were refused as
    'Extra inputs are not permitted' alone; the message now names the setting meant."""
    text = VALID.replace("    output_price_per_mtok: 2\n", "    output_price_per_mtk: 2\n") + (
        "policies:\n  default:\n    candidates: [small]\n    max_cost_per_request: 0.05\n")
    with pytest.raises(PolicyValidationError) as caught:
        load_config_text(text, environ=ENV)
    assert "deployments.1.output_price_per_mtk: Extra inputs are not permitted: did you mean " \
           "'output_price_per_mtok'?" in caught.value.problems
    assert "policies.default.max_cost_per_request: Extra inputs are not permitted: did you " \
           "mean 'max_cost_per_request_usd'?" in caught.value.problems
    misplaced = VALID.replace("routes:\n", "server:\n  max_cost_per_request_usd: 1\nroutes:\n")
    with pytest.raises(PolicyValidationError) as caught:
        load_config_text(misplaced, environ=ENV)
    assert caught.value.problems == [
        "server.max_cost_per_request_usd: Extra inputs are not permitted: "
        "'max_cost_per_request_usd' is a setting of another section (docs/configuration.md)"]


def test_an_arm_naming_an_unknown_model_is_told_so() -> None:
    text = VALID + "policies:\n  default: {candidates: [small]}\n" + _two_arms("e", "model:tiny")
    with pytest.raises(PolicyValidationError) as caught:
        load_config_text(text, environ=ENV)
    assert caught.value.problems == ["experiments.e.arms.b.route: unknown model 'tiny'"]


@pytest.mark.parametrize(("written", "kind"), [("2026-11-01", "a date"), ("2026", "a number"),
                                              ("1.5", "a number")])
def test_yaml_dates_and_numbers_in_a_text_field_are_explained(written: str, kind: str) -> None:
    """`tenant: 2026-11-01` (YAML reads it as a date), `2026` or `1.5` were refused with
    pydantic's bare 'valid string', where a boolean there was explained (the config audit)."""
    text = VALID.replace("    tenant: acme\n", f"    tenant: {written}\n")
    with pytest.raises(PolicyValidationError) as caught:
        load_config_text(text, environ=ENV)
    assert caught.value.problems == [
        f"api_keys.0.tenant: Input should be a valid string: YAML read it as {kind}; quote the "
        "value"]


def test_yaml_booleans_and_upper_case_digests_are_explained() -> None:
    """`tenant: NO` (YAML 1.1 reads it as false) and an upper-case `key_sha256` were refused
    with pydantic's 'valid string' and the raw regular expression."""
    text = VALID.replace("    tenant: acme\n", "    tenant: NO\n") + (
        "  - {key_sha256: " + "AB" * 32 + ", tenant: b}\n")
    with pytest.raises(PolicyValidationError) as caught:
        load_config_text(text, environ=ENV)
    assert caught.value.problems == [
        "api_keys.0.tenant: Input should be a valid string: YAML read it as False; quote the "
        "value",
        "api_keys.1.key_sha256: not a SHA-256 digest: 64 lower-case hexadecimal digits "
        "(sha256sum's output)"]


def _two_arms(name: str, route: str) -> str:
    """An `experiments:` section: experiment `name` on chat, control and arm `b` on `route`."""
    return f"""experiments:
  - name: {name}
    tasks: [chat]
    salt: s1
    arms:
      - {{name: control, route: "policy:default", control: true, share: 0.5}}
      - {{name: b, route: "{route}", share: 0.5}}
"""


def test_routes_may_be_left_out_when_policies_route_every_task() -> None:
    """`routes.default_model` was required though a `policies` section routes every task and
    never reads it; it is now required only without one, and said so."""
    without_routes = VALID.replace("routes:\n  default_model: small\n  by_task: {code: small}\n",
                                   "")
    with_policies = without_routes + "policies:\n  default: {candidates: [small]}\n"
    runtime = resolve(load_config_text(with_policies, environ=ENV), ENV, _prices)
    assert runtime.default_model is None and "auto" in runtime.aliases
    with pytest.raises(PolicyValidationError) as caught:
        load_config_text(without_routes, environ=ENV)
    assert caught.value.problems == [
        "routes.default_model: required without a policies section (the model `auto` routes "
        "a task to when routes.by_task names none)"]


def test_a_model_string_litellm_cannot_serve_is_reported_with_the_unset_keys(
        tmp_path: Path) -> None:
    """`serve` reported a model string litellm cannot serve only once every environment
    problem was fixed (it was checked on the resolved deployments, which need the keys): an
    operator fixed the config in rounds. Both come in one list now."""
    from router.wiring import build_runtime

    text = """version: 1
deployments:
  - {name: oai-mini, model: openai/gpt-4o-mini, api_key: env:UNSET_KEY_FOR_TEST}
  - {name: weird, model: notaprovider/foo, input_price_per_mtok: 1, output_price_per_mtok: 1}
models: [{name: m, deployments: [oai-mini, weird]}]
routes: {default_model: m}
"""
    with pytest.raises(ConfigError) as caught:
        build_runtime(load_config_text(text), {}, tmp_path)
    problems = caught.value.problems
    assert any(p.startswith("deployments.weird: litellm cannot tell the provider")
               for p in problems), problems
    assert any("UNSET_KEY_FOR_TEST is not set" in p for p in problems), problems


def test_the_config_version_tells_apart_what_the_policy_version_leaves_out() -> None:
    """A canary that re-points a deployment's `api_base` keeps the policy version (its cached
    answers stay reachable) and showed nothing else by which an operator could tell the two
    fleets apart (the rollout audit): `config_version` (`/readyz`, `serve`'s start-up line)
    hashes every setting. An experiment's guardrails no longer change the policy version (each
    edit emptied the cache, though the arm is in the cache key)."""
    from policies.loader import config_hash

    base = load_config_text(VALID, environ=ENV)
    moved = load_config_text(VALID, environ={**ENV, "BASE": "http://127.0.0.1:10"})
    assert content_hash(base) == content_hash(moved)
    assert config_hash(base) != config_hash(moved)
    experiment = """experiments:
  - name: e
    tasks: [chat]
    salt: s
    arms:
      - {name: control, route: "policy:default", control: true, share: 0.5}
      - {name: b, route: "model:small", share: 0.5}
    metrics: [{name: thumbs_up, kind: binary}]
policies:
  default: {candidates: [small]}
"""
    plain = load_config_text(VALID + experiment, environ=ENV)
    guarded = load_config_text(VALID + experiment.replace(
        "    metrics: [{name: thumbs_up, kind: binary}]\n",
        "    metrics: [{name: thumbs_up, kind: binary}]\n"
        "    guardrails: [{kind: error_rate, max_rate: 0.1}]\n"), environ=ENV)
    assert content_hash(plain) == content_hash(guarded)
    assert config_hash(plain) != config_hash(guarded)
    salted = load_config_text(VALID + experiment.replace("salt: s", "salt: t"), environ=ENV)
    assert content_hash(plain) != content_hash(salted)


@pytest.mark.parametrize("model", ["hosted_vllm/meta-llama/Llama-3.1-8B-Instruct",
                                   "anthropic/claude-haiku-4-5", "meta-llama/Llama-3.1-8B"])
def test_a_pass_through_deployment_of_another_server_needs_its_address(model: str) -> None:
    """Without api_base the pass-through adapter calls api.openai.com: a vLLM or Anthropic
    model's traffic, and its key, went to OpenAI (the misconfiguration audit of 2026-12-06)."""
    with pytest.raises(ValueError, match="set api_base to the server of"):
        DeploymentSpec(name="d", model=model, adapter="openai_passthrough")
    assert DeploymentSpec(name="d", model=model, adapter="openai_passthrough",
                          api_base="http://10.0.0.5:8000/v1").api_base == "http://10.0.0.5:8000/v1"
    for openai_s in ("openai/gpt-4o-mini", "gpt-4o-mini"):
        spec = DeploymentSpec(name="d", model=openai_s, adapter="openai_passthrough")
        assert spec.api_base is None


@pytest.mark.parametrize(("written", "kept"), [
    ("http://127.0.0.1:19001//v1", "http://127.0.0.1:19001/v1"),
    ("http://127.0.0.1:19001//v1/", "http://127.0.0.1:19001/v1"),
    ("https://h/openai//deployments///x?api-version=a//b",
     "https://h/openai/deployments/x?api-version=a//b"),
])
def test_doubled_slashes_in_an_api_base_path_are_one(written: str, kept: str) -> None:
    """`${BASE}/v1` with a BASE ending in `/` made `//v1`, which the server answered 404: every
    request paid a refused attempt, then fell back to the priciest deployment."""
    assert DeploymentSpec(name="d", model="openai/m", api_base=written).api_base == kept


@pytest.mark.parametrize("api_base", ["http://127.0.0.1:9/v1?api-version=2024-10-21",
                                      "http://127.0.0.1:9/v1#x",
                                      "http://127.0.0.1:9/v1/chat/completions",
                                      "http://127.0.0.1:9/v1/chat/completions/"])
def test_a_pass_through_api_base_that_is_not_a_base_url_is_refused(api_base: str) -> None:
    """The pass-through adapter appends `/chat/completions` to api_base: after a query or a
    fragment, or to a full endpoint, every call was a 404 and `auto` moved all the traffic to
    a dearer model (the misconfiguration audit). litellm builds its own URLs: left as it was."""
    config = VALID.replace("api_base: ${BASE}/v1", f"api_base: '{api_base}'")
    with pytest.raises(PolicyValidationError) as caught:
        load_config_text(config, environ=ENV)
    (problem,) = caught.value.problems
    assert problem.startswith("deployments.1.api_base: ") and \
        "without a query, fragment or /chat/completions" in problem, problem
    assert DeploymentSpec(name="d", model="openai/m", api_base=api_base).api_base


@pytest.mark.parametrize(("api_base", "says"), [
    ("http://127.0.0.1:93o1/v1", "not a valid URL"),
    ("http://127.0.0.1:99999/v1", "not a valid URL"),
    ("http://[::1/v1", "not a valid URL"),
    ("http://127.0.0.1:9301 /v1", "whitespace"),
    ("http://127.0.0.1:9301/v1/\u00e9", "beyond ASCII"),
    ("http:///v1", "no host"),
    ("https://bot:canary-token@127.0.0.1:9301/v1", "credentials"),
])
@pytest.mark.parametrize("adapter", ["openai_passthrough", "litellm"])
def test_an_api_base_no_request_could_use_is_refused_naming_the_field(
        api_base: str, says: str, adapter: str) -> None:
    """A typo'd port, a `${VAR}` with a trailing space, a path beyond ASCII or a key written
    into the URL passed `policy check`, started, and failed every request as an upstream error
    (through litellm, as an answer "not a chat.completion" from a server never called) while
    `/readyz` saw no configuration fault (the CLI and config audit). Refused at load, the
    field named, the credential never echoed."""
    config = VALID.replace("api_base: ${BASE}/v1", f'api_base: "{api_base}"').replace(
        "adapter: openai_passthrough", f"adapter: {adapter}")
    with pytest.raises(PolicyValidationError) as caught:
        load_config_text(config, environ=ENV)
    (problem,) = caught.value.problems
    assert problem.startswith("deployments.1.api_base: ") and says in problem, problem
    assert "canary-token" not in problem


@pytest.mark.parametrize("api_base", ["http://[::1]:8000/v1", "https://api.openai.com/v1",
                                      "http://sim.internal:9301/v1/some%C3%A9path"])
def test_a_usable_api_base_passes(api_base: str) -> None:
    assert DeploymentSpec(name="d", model="openai/m", api_base=api_base).api_base == api_base


@pytest.mark.parametrize("model", ["openai/gpt-4o-mini ", " openai/gpt-4o-mini",
                                   "openai/gpt-4o-mini\n", "openai/gpt 4o-mini"])
def test_a_deployment_model_with_whitespace_is_refused_naming_the_field(model: str) -> None:
    """`"openai/sim-fast "` from a quoted template was sent as written, and the provider
    answered 404 to every call (the misconfiguration audit)."""
    written = model.replace("\n", "\\n")  # YAML's double-quoted escape
    config = VALID.replace("model: openai/gpt-4o-mini", f'model: "{written}"')
    with pytest.raises(PolicyValidationError) as caught:
        load_config_text(config, environ=ENV)
    (problem,) = caught.value.problems
    assert problem.startswith("deployments.0.model: ") and "whitespace" in problem, problem


def test_a_disk_cache_size_sqlite_cannot_hold_is_refused_and_the_largest_taken_works(
        tmp_path: Path) -> None:
    """1e13 MB loaded, then `serve` died in diskcache with SQLite's OverflowError (the
    misconfiguration audit); 1e9 MB (1 PB) is the most taken, and diskcache stores it."""
    with pytest.raises(PolicyValidationError) as caught:
        load_config_text(VALID + "server:\n  cache: {disk_size_limit_mb: 1.0e+13}\n",
                         environ=ENV)
    (problem,) = caught.value.problems
    assert problem.startswith("server.cache.disk_size_limit_mb: "), problem
    directory = tmp_path / "cache"
    text = VALID + f"server:\n  cache: {{directory: '{directory}', disk_size_limit_mb: 1.0e+9}}\n"
    result_caching(load_config_text(text, environ=ENV))
    with diskcache.Cache(str(directory)) as stored:
        assert stored.size_limit == 10**9 * 1024 * 1024


@pytest.mark.parametrize("backend", ["", "backend: disk, ", "backend: none, "])
def test_a_cache_redis_url_without_the_redis_backend_is_a_config_problem(backend: str) -> None:
    """It was ignored: `/readyz` said `cache: disk` and each replica kept its own cache (the
    misconfiguration audit of 2026-12-06)."""
    config = VALID + f"server:\n  cache: {{{backend}redis_url: 'redis://127.0.0.1:6399/0'}}\n"
    with pytest.raises(PolicyValidationError) as caught:
        load_config_text(config, environ=ENV)
    (problem,) = caught.value.problems
    assert problem.startswith("server.cache: ") and "set backend: redis" in problem, problem


@pytest.mark.parametrize(("written", "says"), [
    ("input_price_per_mtok: 0.00000015", "input_price_per_mtok: 1.5e-07 is 1,000,000 times below"),
    ("input_price_per_mtok: 150", "input_price_per_mtok: 150 is 1,000 times above"),
])
def test_a_price_in_another_unit_than_litellm_s_is_warned_of(written: str, says: str) -> None:
    """Per-token prices in the per-1M fields: `min_cost` sent every request to that model,
    and no cost ceiling held it (the misconfiguration audit of 2026-12-06). A price within
    100x of litellm's, or 0 (self-hosted), is not warned of."""
    config = VALID.replace("    api_key: env:KEY_A\n",
                           f"    api_key: env:KEY_A\n    {written}\n", 1)
    runtime = resolve(load_config_text(config, environ=ENV), ENV, _prices)
    (warning,) = runtime.price_warnings
    assert warning.startswith(f"deployments.a.{says} litellm's 0.15 for 'openai/gpt-4o-mini'")
    for fine in ("input_price_per_mtok: 0.3", "input_price_per_mtok: 0"):
        near = VALID.replace("    api_key: env:KEY_A\n", f"    api_key: env:KEY_A\n    {fine}\n", 1)
        assert resolve(load_config_text(near, environ=ENV), ENV, _prices).price_warnings == ()


def test_a_policy_naming_a_deployment_where_a_model_goes_is_told_which_model_holds_it() -> None:
    """The path is the YAML's (`policies.tasks.code`, not `policies.code`), and a deployment's
    name gets the model to write instead (the misconfiguration audit of 2026-12-06)."""
    config = VALID + ("policies:\n  default: {candidates: [small]}\n"
                      "  tasks:\n    code: {candidates: [a]}\n")
    with pytest.raises(PolicyValidationError) as caught:
        load_config_text(config, environ=ENV)
    assert caught.value.problems == [
        "policies.tasks.code.candidates: unknown model 'a' (a deployment: name its model, "
        "'small')"]


_LINES = VALID.count("\n")


@pytest.mark.parametrize(("added", "problem"), [
    # an unset ${VAR} names the line of its first use (a comment counts: it is substituted)
    ("# ${UNSET_TWICE} in a comment counts too\nnote: ${UNSET_TWICE}/x\n",
     f"line {_LINES + 1}: ${{UNSET_TWICE}} is used but not set in the environment"),
    # a YAML syntax error, by line and column (PyYAML's text named `<unicode string>`, over
    # four lines)
    ("note: {unclosed: 1\nlast: 2\n",
     f"line {_LINES + 2}, column 5: not valid YAML: did not find expected ',' or '}}' (while "
     f"parsing a flow mapping that starts at line {_LINES + 1}, column 7)"),
    # a list setting given one word (pydantic said "Input should be a valid tuple")
    ("policies:\n  default: {candidates: small}\n",
     "policies.default.candidates: should be a list (`[a, b]`, or one `- item` a line)"),
])
def test_a_problem_is_one_line_that_says_where_and_what(added: str, problem: str) -> None:
    with pytest.raises(PolicyValidationError) as caught:
        load_config_text(VALID + added, environ=ENV)
    assert caught.value.problems == [problem]


@pytest.mark.parametrize("value", ["http://host/v1 #frag", "a\nb: c"])
def test_a_placeholder_value_yaml_would_cut_is_refused(value: str) -> None:
    """`${VAR}` is substituted into the text YAML then reads: a value holding ` #` lost the
    rest of its line as a comment, and one holding a line break wrote a new setting."""
    text = VALID + "note: ${CUT}\n"
    with pytest.raises(PolicyValidationError) as caught:
        load_config_text(text, environ={**ENV, "CUT": value})
    [problem] = caught.value.problems
    assert problem.startswith(f"line {text.count(chr(10))}: ${{CUT}}'s value holds")
    assert value not in problem


def test_a_client_key_too_short_to_resist_guessing_is_warned_of_without_its_value() -> None:
    """A 2-character client key started without a word (the security audit): the start-up log
    now says which entry, by place and variable. A long key, or one given by its digest only,
    is not warned of."""
    config = load_config_text(VALID, environ=ENV)
    (warning,) = resolve(config, ENV, _prices).key_warnings
    assert warning.startswith("api_keys[0].key (env:CLIENT_KEY) is 13 characters"), warning
    assert ENV["CLIENT_KEY"] not in warning
    long_key = {**ENV, "CLIENT_KEY": "k" * 16}
    assert resolve(load_config_text(VALID, environ=long_key), long_key, _prices).key_warnings == ()
    by_digest = VALID.replace("  - key: env:CLIENT_KEY\n", f"  - key_sha256: {'ab' * 32}\n")
    assert resolve(load_config_text(by_digest, environ=ENV), ENV, _prices).key_warnings == ()


@pytest.mark.parametrize(("text", "told"), [
    ("note: 0200000\n", "octal or base-60"),  # octal: 65536
    ("note: 1:30\n", "octal or base-60"),  # base 60: 90
    ("note: 0:25.0\n", "base-60"),  # a base-60 float: 25.0
    ("note: !!set {large, balanced}\n", "!!set has no order"),  # hash order
])
def test_yaml_1_1_forms_that_load_as_another_value_are_refused(text: str, told: str) -> None:
    """A leading zero read as octal (`context_window: 0200000` loaded as 65536), `1:30` as 90,
    and `!!set` in hash order (a candidate list written as one ran in an order, and under a
    policy version, that changed from process to process: the policies audit of 2026-12-07)."""
    with pytest.raises(PolicyValidationError) as caught:
        load_config_text(VALID + text, environ=ENV)
    [problem] = caught.value.problems
    assert problem.startswith("line ") and told in problem
    assert safe_load("a: 200000\nb: 0\nc: 0x10\nd: 1_000") == {"a": 200000, "b": 0, "c": 16,
                                                              "d": 1000}
