"""Evaluate stage: statistics from raw samples, case classes, gates and the verdict (pure functions)."""
