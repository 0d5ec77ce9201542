"""Open-loop load generation and reporting for `slorouter bench`.

`workload` (mix files → request bodies, pure and seeded), `loadgen` (Poisson arrivals sent
independently of responses), `stats` (percentiles, errors by class, segments), `plots` (PNG),
`progress` (a terminal progress line) and `cli` (the `bench` sub-command). Nothing here imports
the service: the generator talks HTTP to any OpenAI-compatible endpoint.
"""
