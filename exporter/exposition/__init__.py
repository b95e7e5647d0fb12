"""The exposition layer: the metric catalogue, the Snapshot turned into metric families, and the
text format. Reads Snapshots only."""
