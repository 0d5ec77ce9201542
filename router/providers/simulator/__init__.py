"""The provider simulator: an OpenAI- and Anthropic-compatible LLM server with measured latency.

Run it with `slorouter sim --port P [--profile FILE]` (see `docs/simulator.md`), or in process
with `running_simulator(...)`. Profiles (`ModelProfile`, `ProfileFile`) say how each model name
behaves; `presets` has ready-made ones for tests; `SimulatorControl` drives the control API of
a running simulator. Module map: `profile` (config), `sampling`/`plan`/`content` (pure draws),
`request` and the `*_wire` modules (formats), `engine` (timing and writing), `state`, `stats`,
`prefix_cache`, `capacity` (run-time state), `server`/`control`/`cli` (HTTP and CLI),
`fit_profiles` (the fitting script behind `default_profiles.json`).
"""
