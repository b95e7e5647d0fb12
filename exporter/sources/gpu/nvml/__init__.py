"""NVIDIA GPUs through NVML: the first GPU device backend, its XID event
thread and its check."""
