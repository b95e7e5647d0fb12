"""Power sources: node energy by zone (RAPL, hwmon, the estimate). One module each, each with
its SPEC; exporter/app/registry.py lists them."""
