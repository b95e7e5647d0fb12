"""The host layer: reading the machine's files safely (numbers as the kernel writes them,
capabilities, cgroupfs paths and ids, /proc/<pid>/stat). Sources and Kubernetes code share it."""
