"""The stages of one trial, one module each; `qualify/run/engine.py` runs them in order.

A stage takes what it needs as values and returns what it found. Evidence that must survive a
fault part-way through a stage (samples, failures, a case's facts) goes into the sinks the
sequencer hands it; a fault leaves the stage wrapped with where it happened (`where.Located`).
"""
