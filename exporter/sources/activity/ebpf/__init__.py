"""Activity from eBPF: the programs' loader (compiled in a child process),
their maps, kernel headers and BTF, and the per-task accounting of what they count."""
