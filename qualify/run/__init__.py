"""Run stage: the device floor. The device session, inputs, timing, the engine, and the processes and
tools that touch the GPU; the only package that loads the CUDA driver."""
