"""Experiments in the service: per-arm outcomes, feedback, statistics, halting and reports.

The spec and the pure assignment live in `policies.experiments`; this package records what
happened on each arm (`outcomes`, `outcomes_redis`), analyses it (`analysis` with `bootstrap`,
`sequential`, `guardrails`) and renders it (`report`, `plot`). Wiring into the request path,
the feedback endpoint and the CLI is done by the composition root.
"""
