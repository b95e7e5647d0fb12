"""Who is who: cgroup paths to containers and pods, and (later) their Kubernetes names."""
