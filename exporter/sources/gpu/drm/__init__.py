"""AMD and Intel GPUs through the kernel's DRM interfaces: the second GPU device
backend (sysfs and hwmon readings, per-client engine time from fdinfo)."""
