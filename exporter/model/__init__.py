"""The model layer: the frozen types every other layer shares (readings, configuration,
identity, the Snapshot, source specs and the protocols the monitor depends on). Imports nothing
of wattprobe's."""
