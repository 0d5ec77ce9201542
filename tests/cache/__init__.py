"""Tests of the cache package."""
