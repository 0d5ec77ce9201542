"""`python -m bench.cold_path` runs the side-by-side benchmark's full config in process against
the simulator and times every phase it names: a renamed function would leave its row empty."""

from __future__ import annotations

import re
import subprocess

from bench.cold_path import LABEL_WIDTH, PHASES, TO_CLIENT, TO_UPSTREAM, WHOLE
from bench.vs_litellm import ROOT
from tests.support.procs import PYTHON

# Phases every answered request runs (the refreshers run when due, not per request).
PER_REQUEST = ("authenticate", "read the body", "validate the body",
               "prepare (classify + decide)", "  classify", "  decide",
               "cache plan (rule, scope, key)", "cache lookup",
               "upstream call (runner, client)", "  upstream write (system call)",
               "record the outcome (every sink)", "  statistics and SLO",
               "telemetry (metrics, spans)")


def test_every_per_request_phase_is_timed_at_each_gap() -> None:
    done = subprocess.run([PYTHON, "-m", "bench.cold_path", "--targets", "slorouter-full",
                           "--gaps", "0,20", "--requests", "6", "--warm-up", "2"],
                          cwd=ROOT, capture_output=True, text=True, timeout=240, check=True)
    rows = {line[:LABEL_WIDTH].rstrip(): line[LABEL_WIDTH:].split()
            for line in done.stdout.splitlines()}
    assert rows["phase"] == ["gap", "0", "ms", "gap", "20", "ms"]
    whole = [float(v) for v in rows[f"{WHOLE} (median)"]]
    assert len(whole) == 2 and all(v > 0 for v in whole)
    for label in (TO_UPSTREAM, TO_CLIENT):  # the critical path's two stretches, each inside
        values = [float(v) for v in rows[f"{label} (median)"]]  # the whole request's CPU
        assert len(values) == 2 and all(0 < v < w for v, w in zip(values, whole, strict=True)), (
            label, values)
    assert set(PER_REQUEST) <= {label for label, _, _ in PHASES}
    for label in PER_REQUEST:
        values = [float(v) for v in rows[f"{label} (mean)"]]
        assert len(values) == 2 and all(0 < v < max(whole) * 3 for v in values), (label, values)
    assert re.search(r"6 requests per gap", done.stdout)
