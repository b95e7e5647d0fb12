"""GPUs: readings from NVML, per-GPU energy accounting and attribution, their metric families."""
