"""Build stage: NVRTC compilation of CUDA source arms and their resource usage."""
