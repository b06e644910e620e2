"""Run stage: the device session, inputs, the ABBA schedule, timing, fidelity and the engine."""
