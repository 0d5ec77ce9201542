"""What a run leaves behind: `summary.json` and the plots in its output directory, and the exit
code its summary earns. Shared by `slorouter bench` and `bench.suite`."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import orjson

from router.loadtest.loadgen import RunResult
from router.loadtest.plots import latency_histogram, percentiles_over_time
from router.loadtest.stats import Summary

SUMMARY, HISTOGRAM, OVER_TIME = "summary.json", "latency_hist.png", "percentiles_over_time.png"
TTFT_HISTOGRAM = "ttft_hist.png"
INTERRUPTED = 130  # as a shell reports a command ended by Ctrl-C


def prepare_out(out: Path) -> None:
    """Create the output directory before any load, and refuse one whose files cannot be
    written (an `OSError`): a run found that out only once its load was over, and lost it."""
    out.mkdir(parents=True, exist_ok=True)
    for name in (SUMMARY, HISTOGRAM, OVER_TIME, TTFT_HISTOGRAM):
        if (out / name).is_dir():
            raise IsADirectoryError(f"{out / name} is a directory: the run writes a file there")


def write_outputs(result: RunResult, summary: Summary, out: Path,
                  ttft_histogram: bool = False) -> list[str]:
    """Write the summary and the plots into `out`; the names written."""
    (out / SUMMARY).write_bytes(
        orjson.dumps(dataclasses.asdict(summary), option=orjson.OPT_INDENT_2))
    latency_histogram([result], out / HISTOGRAM)
    written = [SUMMARY, HISTOGRAM]
    if ttft_histogram:
        latency_histogram([result], out / TTFT_HISTOGRAM, metric="ttft_s")
        written.append(TTFT_HISTOGRAM)
    percentiles_over_time(result, out / OVER_TIME)
    return [*written, OVER_TIME]


def exit_code(result: RunResult, summary: Summary) -> int:
    """0 when every request sent was answered, 1 when any failed, 130 when interrupted."""
    if result.interrupted:
        return INTERRUPTED
    return 0 if summary.sent and summary.ok == summary.sent else 1
