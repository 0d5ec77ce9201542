"""Benchmarks: repeatable commands that print numbers, side by side with a baseline."""
