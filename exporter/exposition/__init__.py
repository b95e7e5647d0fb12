"""The exposition layer: the Prometheus text format and the per-snapshot rendered bytes."""
