"""Open-loop load generation and reporting for `slorouter bench`."""
