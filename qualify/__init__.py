"""qualify: qualify CUDA kernel changes under frozen, pre-registered protocols."""

__version__ = "0.1.0"
