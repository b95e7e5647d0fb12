"""Activity sources: CPU time and GPU ioctls per cgroup or process (/proc, eBPF)."""
