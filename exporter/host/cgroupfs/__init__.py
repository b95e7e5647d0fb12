"""Readers of the cgroup filesystem that sources and workloads both use (cgroup ids, namespaces)."""
