"""Test harness: real processes (service, simulator, redis-server) on free loopback ports."""
