"""Activity from /proc: node CPU times, per-process CPU, the cgroup totals of
exited processes, and what hidepid lets us see."""
