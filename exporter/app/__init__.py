"""The application layer: the command line, the agent that owns serve's threads, the wiring
that builds parts from a Config, the source registry, `check` and `top`."""
