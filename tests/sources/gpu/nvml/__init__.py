"""The fake libnvidia-ml.so.1 (fake_nvml.c), how to build it, and how to drive its scenarios."""
