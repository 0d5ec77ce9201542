"""Execution: the only layer that awaits provider I/O (fallback ⊃ retries ⊃ hedging ⊃ attempt)."""
