"""Tests of the reliability building blocks (deadlines, budgets, breakers, hedging, ...)."""
