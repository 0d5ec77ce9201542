"""Fit the simulator's built-in demo profiles to the measured provider latencies.

    python -m router.providers.simulator.fit_profiles --data /path/to/shared/data/latency \
        [--out router/providers/simulator/default_profiles.json]

Reads `provider_latency.jsonl`, the per-request files behind its lines (`requests_*.jsonl`) and
`output_lengths.jsonl` (see that folder's README: S1 llmperf-leaderboard, S2 thefastest, S3
philschmid-llmperf, S5 Azure trace) and writes the committed profile file. Every number carries
its source in the profile's `sources`. Only this script reads the data folder; the simulator
reads the committed file.

Choices (from the README): S2 lines are pooled over client regions and clean runs only; TTFT and
TPOT are drawn from a table of the line's per-request quantiles (`fit_shapes.GRID`), because a
lognormal through p50 and p99 alone misses the shape between them (KS up to 0.43); the p50/p99
fields stay quantile-matched (and, where a slow TTFT tail is material, a body lognormal by MLE
plus tail share/median/max), which is what a change of those fields falls back to; each
profile's `sources` records the KS distance of both to the requests. S1 TPOT is the derived
DESIGN.md TPOT, never the published ITL; TTFT measured at a 550-token prompt has the prefill of
those tokens taken out, so `prefill_ms_per_token` adds it back for the request's real length.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from router.providers.simulator import fit_shapes
from router.providers.simulator.profile import (
    BUILTIN_PROFILE_PATH,
    ModelProfile,
    ProfileFile,
    dump_profile_file,
)
from router.providers.simulator.sampling import Z99

Row = Mapping[str, object]
POOLED_S2 = "fly-cdg+iad+sea"
# The per-request rows behind each source's summary lines (S4 has none).
REQUEST_FILES = {
    "llmperf-leaderboard": "requests_llmperf_leaderboard.jsonl",
    "thefastest": "requests_thefastest.jsonl",
    "philschmid-llmperf": "requests_philschmid_llmperf.jsonl",
}
# The conditions a summary line fixes; its requests are the completed rows that share them.
LINE_KEYS = ("source", "provider", "model", "endpoint_region", "concurrency", "max_tokens")
S3_VLLM = "self-hosted-vllm-0.4.3"
S3_PROMPT_TOKENS = 550


@dataclass(frozen=True)
class Selector:
    """Which summary line of `provider_latency.jsonl` a demo model is fitted to."""

    source: str
    provider: str
    model: str
    client_region: str | None = None
    scenario: str | None = None

    def matches(self, row: Row) -> bool:
        return (row["source"], row["provider"], row["model"]) == (
            self.source, self.provider, self.model
        ) and self.client_region in (None, row["client_region"]) and self.scenario in (
            None, row["scenario"])

    def label(self) -> str:
        where = self.client_region or self.scenario or ""
        return f"{self.source} {self.provider} {self.model} {where}".strip()


@dataclass(frozen=True)
class DemoSpec:
    """A demo model: the measured line it copies and the assumptions added to it."""

    name: str
    selector: Selector
    prefill_ms_per_token: float
    prefill_source: str
    use_tail: bool = False
    extra: Mapping[str, object] = field(default_factory=dict)
    extra_sources: Mapping[str, str] = field(default_factory=dict)


def _num(row: Row, key: str) -> float:
    value = row[key]
    if not isinstance(value, int | float):
        raise ValueError(f"{key} is not a number in {row.get('model')}")
    return float(value)


def _sub(row: Row, key: str) -> Mapping[str, float]:
    value = row[key]
    if not isinstance(value, dict):
        raise ValueError(f"{key} is missing in {row.get('model')}")
    return value


def read_jsonl(path: Path) -> list[Row]:
    with path.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def select(rows: Sequence[Row], selector: Selector) -> Row:
    found = [r for r in rows if selector.matches(r)]
    if len(found) != 1:
        raise ValueError(f"{selector.label()}: {len(found)} matching lines, expected 1")
    return found[0]


def client_regions(line: Row) -> set[str | None]:
    """The client regions a line summarises: `fly-cdg+iad+sea` pools `fly-cdg`, `fly-iad`, ..."""
    first, *others = str(line["client_region"]).split("+")
    prefix = first.rsplit("-", 1)[0] + "-" if others else ""
    return {first, *(prefix + other for other in others)}


def request_rows(requests: Sequence[Row], line: Row) -> list[Row]:
    """The completed requests a summary line was computed from (S2: clean runs only, as its
    `runs_used` says); their count must be the line's `n_ok`, or the selection is wrong."""
    regions = client_regions(line) | {None}  # S3's rows name no region (one localhost client)
    found = [r for r in requests if r["ok"] and not r.get("client_contention_suspect")
             and r.get("client_region") in regions
             and all(r.get(k) == line.get(k) for k in LINE_KEYS)]
    if len(found) != line["n_ok"]:
        raise ValueError(f"{line['provider']} {line['model']}: {len(found)} requests, "
                         f"the summary counts {line['n_ok']}")
    return found


def measured_prompt_tokens(row: Row) -> float:
    """Prompt tokens of the measurement (S2 has a handful: its `input_tokens` is null)."""
    value = row.get("input_tokens_p50")
    return float(value) if isinstance(value, int | float) else 0.0


def s3_prefill_slope(rows: Sequence[Row]) -> float:
    """ms per prompt token from S3 vLLM: at c=4 four 550-token prefills queue in each wave,
    so (TTFT p50 at c=4 - TTFT p50 at c=1) / 3 is one more prefill."""
    one = select(rows, Selector("philschmid-llmperf", S3_VLLM, "yi-1.5-34b-chat",
                                scenario="in550_out150_c1"))
    four = select(rows, Selector("philschmid-llmperf", S3_VLLM, "yi-1.5-34b-chat",
                                 scenario="in550_out150_c4"))
    return (_num(four, "ttft_ms_p50") - _num(one, "ttft_ms_p50")) / 3 / S3_PROMPT_TOKENS


def ttft_fields(row: Row, spec: DemoSpec) -> dict[str, float]:
    """TTFT body (and tail), with the measured prompt's prefill taken out."""
    prefill = spec.prefill_ms_per_token * measured_prompt_tokens(row)
    if spec.use_tail:
        body = _sub(row, "ttft_body_lognormal")
        tail = _sub(row, "ttft_tail")
        p50 = math.exp(body["mu"])
        p99 = math.exp(body["mu"] + Z99 * body["sigma"])
        return {"ttft_p50_ms": round(p50 - prefill, 1), "ttft_p99_ms": round(p99 - prefill, 1),
                "ttft_tail_share": round(tail["share"], 4),
                "ttft_tail_p50_ms": round(tail["p50_ms"], 1),
                "ttft_tail_max_ms": round(tail["max_ms"], 1)}
    return {"ttft_p50_ms": round(_num(row, "ttft_ms_p50") - prefill, 1),
            "ttft_p99_ms": round(_num(row, "ttft_ms_p99") - prefill, 1)}


def error_fields(row: Row) -> dict[str, float]:
    """429 share of the measured requests (S1/S3 record failures; S2 does not)."""
    codes = row.get("error_codes")
    if not isinstance(codes, dict) or "429" not in codes:
        return {}
    return {"error_rate_429": round(codes["429"] / _num(row, "n_requests"), 4)}


def output_fields(lengths: Sequence[Row]) -> tuple[dict[str, int], str]:
    """Output length from the S5 Azure conversation trace (p50, p99, max)."""
    conv = next(r for r in lengths if r["workload"] == "conversation")
    fields = {"output_tokens_p50": round(_num(conv, "output_tokens_p50")),
              "output_tokens_p99": round(_num(conv, "output_tokens_p99")),
              "output_tokens_max": round(_num(conv, "output_tokens_max"))}
    return fields, "S5 Azure LLM inference trace 2023, conversation: output p50/p99/max"


def parametric_cdfs(fields: Mapping[str, object], prefix: str
                    ) -> tuple[fit_shapes.Cdf, fit_shapes.Cdf]:
    """The CDF the profile's lognormal fields (`ttft_*` or `tpot_*`) draw from without a table."""
    def num(key: str) -> float:
        value = fields.get(f"{prefix}_{key}", 0.0)
        assert isinstance(value, int | float)
        return float(value)

    if num("tail_share") > 0:
        return fit_shapes.mixture_cdfs(num("p50_ms"), num("p99_ms"), num("tail_share"),
                                       num("tail_p50_ms"), num("tail_max_ms"))
    return fit_shapes.lognormal_cdfs(num("p50_ms"), num("p99_ms"))


def shape_fields(sample: Sequence[float], fields: Mapping[str, object], prefix: str,
                 digits: int) -> tuple[dict[str, object], str]:
    """The quantile table of `sample` for `<prefix>_quantiles_ms`, and the note of its KS
    distance to the sample beside that of the lognormal fields it replaces."""
    table = fit_shapes.table_of(sample, digits)
    ks_table = fit_shapes.table_distance(sample, table)
    ks_lognormal = fit_shapes.ks_distance(sample, *parametric_cdfs(fields, prefix))
    note = (f"KS distance {ks_table:.3f} of the quantile table's draws to the {len(sample)} "
            f"measured requests (the p50/p99 lognormal fields alone: {ks_lognormal:.3f})")
    return {f"{prefix}_quantiles_ms": table}, note


def fit_one(rows: Sequence[Row], requests: Mapping[str, Sequence[Row]], spec: DemoSpec,
            output: tuple[dict[str, int], str]) -> ModelProfile:
    """The profile of one demo model, each field's source recorded in `sources`."""
    row = select(rows, spec.selector)
    label = spec.selector.label()
    measured = request_rows(requests[str(row["source"])], row)
    prefill = spec.prefill_ms_per_token * measured_prompt_tokens(row)
    fields: dict[str, object] = {**ttft_fields(row, spec), **output[0]}
    fields["tpot_p50_ms"] = round(_num(row, "tpot_ms_p50"), 2)
    fields["tpot_p99_ms"] = round(_num(row, "tpot_ms_p99"), 2)
    ttft_table, ttft_ks = shape_fields([_num(r, "ttft_ms") - prefill for r in measured], fields,
                                       "ttft", 1)
    tpot_table, tpot_ks = shape_fields([_num(r, "tpot_ms") for r in measured
                                        if r["tpot_ms"] is not None], fields, "tpot", 3)
    fields.update({**ttft_table, **tpot_table})
    fields["prefill_ms_per_token"] = round(spec.prefill_ms_per_token, 3)
    fields.update(error_fields(row))
    table_source = (f"table of {len(fit_shapes.GRID)} quantiles of the line's requests (min, "
                    "every 2.5 %, p99, max), drawn by inverse CDF, log-linear between them")
    sources = {
        "ttft": f"{label}: TTFT {table_source}"
        + (f", minus prefill of {measured_prompt_tokens(row):.0f} prompt tokens"
           if measured_prompt_tokens(row) else "")
        + "; p50/p99 fields quantile-matched"
        + (" (body MLE lognormal + slow tail)" if spec.use_tail else ""),
        "ttft_ks": ttft_ks,
        "tpot": f"{label}: TPOT (DESIGN.md TPOT, per-request average) {table_source}; "
                "p50/p99 fields quantile-matched",
        "tpot_ks": tpot_ks,
        "output_tokens": output[1],
        "prefill_ms_per_token": spec.prefill_source,
    }
    if "error_rate_429" in fields:
        sources["error_rate_429"] = f"{label}: share of HTTP 429 among measured requests"
    fields.update(spec.extra)
    sources.update(spec.extra_sources)
    return ModelProfile.model_validate({**fields, "sources": sources})


def cross_source_slopes(rows: Sequence[Row]) -> tuple[float, float]:
    """Range of (S1 TTFT p50 - S2 TTFT p50) / 540 over provider/models measured by both."""
    s1 = {(r["provider"], r["model"]): r for r in rows if r["source"] == "llmperf-leaderboard"}
    s2 = {(r["provider"], r["model"]): r for r in rows
          if r["source"] == "thefastest" and r["client_region"] == POOLED_S2}
    slopes = [(_num(s1[k], "ttft_ms_p50") - _num(s2[k], "ttft_ms_p50")) / 540
              for k in sorted(set(s1) & set(s2))]
    return min(slopes), max(slopes)


HOSTED_CACHE = {"prefix_cache_factor": 0.5, "prefix_cache_min_tokens": 1024,
                "prefix_cache_ttl_s": 300.0}
HOSTED_CACHE_SOURCE = ("assumption: providers cache prompts of >= 1024 tokens for about 5 "
                       "minutes (OpenAI and Anthropic docs); the TTFT saving (x0.5) is not "
                       "measured in the data")
ACCURACY_SOURCE = "assumption for eval demos (issue 4): no quality data in the latency folder"
PRICE_SOURCE = "list price per 1M tokens at the time of the measurement (provider price page)"
PRICE_ASSUMED = "assumption: the provider's 2023-24 price is not in the data"


def _hosted(name: str, selector: Selector, slope: float, slope_source: str,
            extra: Mapping[str, object], price_source: str, use_tail: bool = False) -> DemoSpec:
    return DemoSpec(
        name=name, selector=selector, prefill_ms_per_token=slope, prefill_source=slope_source,
        use_tail=use_tail, extra={**HOSTED_CACHE, **extra},
        extra_sources={"prefix_cache": HOSTED_CACHE_SOURCE, "accuracy": ACCURACY_SOURCE,
                       "price": price_source, "context_window": "the model's documented window",
                       **({"error_rate_500": "S1 together llama-2-13b-chat: 1/150 client "
                           "exceptions without status (-1), modelled as HTTP 500"}
                          if "error_rate_500" in extra else {})})


def hosted_slope_source(rows: Sequence[Row]) -> str:
    """Why the hosted prefill slopes are assumptions, with the cross-source range as evidence."""
    low, high = cross_source_slopes(rows)
    return (f"assumption: hosted prefill slopes are not measured; S1 (550-token prompt) minus "
            f"S2 (short prompt) TTFT for the same provider/model gives {low:.2f} to "
            f"{high:.2f} ms/token (different dates and connection set-up), so it is set below "
            f"the measured self-hosted 34B slope, growing with model size")


def s2(provider: str, model: str) -> Selector:
    """An S2 line pooled over the three client regions."""
    return Selector("thefastest", provider, model, POOLED_S2)


def s1(provider: str, model: str) -> Selector:
    return Selector("llmperf-leaderboard", provider, model)


def demo_specs(rows: Sequence[Row]) -> list[DemoSpec]:
    """The demo models (names as in `policies/defaults/simulator.yaml`): sim-fast, sim-balanced,
    sim-large, plus sim-fast-queueing, sim-flaky, sim-throttled, sim-self-hosted."""
    hosted = hosted_slope_source(rows)
    # rounded as the profile carries it: the prefill taken out of the measured TTFT must be the
    # one the simulator adds back (unrounded, sim-self-hosted's tight TTFT sat 0.1 ms off)
    s3 = round(s3_prefill_slope(rows), 3)
    return [
        _hosted("sim-fast", s2("anthropic", "claude-3-haiku-20240307"), 0.05, hosted,
                {"accuracy": 0.70, "context_window": 200_000, "price_input_per_mtok": 0.25,
                 "price_output_per_mtok": 1.25}, PRICE_SOURCE),
        _hosted("sim-balanced", s2("anthropic", "claude-3-sonnet-20240229"), 0.1, hosted,
                {"accuracy": 0.85, "context_window": 200_000, "price_input_per_mtok": 3.0,
                 "price_output_per_mtok": 15.0}, PRICE_SOURCE),
        _hosted("sim-large", s2("anthropic", "claude-3-opus-20240229"), 0.25, hosted,
                {"accuracy": 0.95, "context_window": 200_000, "price_input_per_mtok": 15.0,
                 "price_output_per_mtok": 75.0}, PRICE_SOURCE),
        _hosted("sim-fast-queueing", s2("groq", "mixtral-8x7b-instruct"), 0.02, hosted,
                {"accuracy": 0.75, "context_window": 32_768, "price_input_per_mtok": 0.27,
                 "price_output_per_mtok": 0.27}, PRICE_SOURCE, use_tail=True),
        _hosted("sim-flaky", s1("perplexity", "llama-2-70b-chat"), 0.2, hosted,
                {"accuracy": 0.80, "context_window": 4096, "error_rate_500": 0.0067,
                 "price_input_per_mtok": 0.7, "price_output_per_mtok": 2.8}, PRICE_ASSUMED),
        _hosted("sim-throttled", s1("lepton", "llama-2-70b-chat"), 0.2, hosted,
                {"accuracy": 0.80, "context_window": 4096, "retry_after_s": 1.0,
                 "price_input_per_mtok": 0.8, "price_output_per_mtok": 0.8}, PRICE_ASSUMED),
        DemoSpec(
            "sim-self-hosted", Selector("philschmid-llmperf", S3_VLLM, "yi-1.5-34b-chat",
                                    scenario="in550_out150_c1"),
            s3, "S3 vLLM 0.4.3 Yi-1.5-34B: (TTFT p50 at c=4 - at c=1) / 3 / 550 tokens",
            extra={"accuracy": 0.78, "context_window": 4096, "prefix_cache_factor": 0.25,
                   "prefix_cache_min_tokens": 16, "prefix_cache_ttl_s": 600.0,
                   "price_input_per_mtok": 0.0, "price_output_per_mtok": 7.1},
            extra_sources={
                "prefix_cache": "assumption: vLLM automatic prefix caching (16-token blocks); "
                                "the saving (x0.25) is not measured in the data",
                "accuracy": ACCURACY_SOURCE,
                "price": "assumption: $5.672/h (g5.12xlarge on-demand) at S3's c=16 decode "
                         "rate (16 / 72 ms = 222 tokens/s)",
                "context_window": "Yi-1.5-34B-Chat's 4k window"}),
    ]


def fit(data: Path) -> ProfileFile:
    """All demo profiles fitted from the data folder."""
    rows = read_jsonl(data / "provider_latency.jsonl")
    requests = {source: read_jsonl(data / name) for source, name in REQUEST_FILES.items()}
    output = output_fields(read_jsonl(data / "output_lengths.jsonl"))
    models = {spec.name: fit_one(rows, requests, spec, output) for spec in demo_specs(rows)}
    notes = [
        "Generated by `python -m router.providers.simulator.fit_profiles --data "
        "<shared>/data/latency`; do not edit by hand, change the script.",
        "Sources: S1 ray-project/llmperf-leaderboard (Dec 2023 - Jan 2024, us-west-2, 550-token "
        "prompt, c=5), S2 fixie-ai/thefastest.ai (Apr - May 2024, best of 4, pooled regions, "
        "clean runs), S3 philschmid/llmperf (Jun 2024, vLLM, Yi-1.5-34B), S5 Azure LLM "
        "inference trace 2023 (CC-BY-4.0, Splitwise, ISCA 2024). Shapes and ratios, not "
        "today's absolute latency of a named provider.",
    ]
    return ProfileFile(models=models, default_model=None, notes=notes)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--data", type=Path, required=True, help="the latency data folder")
    parser.add_argument("--out", type=Path, default=BUILTIN_PROFILE_PATH, help="output file")
    args = parser.parse_args(argv)
    args.out.write_text(dump_profile_file(fit(args.data)), encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
