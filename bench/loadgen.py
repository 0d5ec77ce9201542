"""Open-loop load generator: moved to `router.loadtest.loadgen`; re-exported for old scripts."""

from router.loadtest.loadgen import RunResult, Sample, poisson_schedule, run_open_loop, run_plan

__all__ = ["RunResult", "Sample", "poisson_schedule", "run_open_loop", "run_plan"]
