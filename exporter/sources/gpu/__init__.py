"""GPU backends: one folder per vendor interface (NVML, DRM), the backend protocol's helpers and
the composite that merges several backends into one reading."""
