"""The accounting layer: per device meters (readings to joules, idle), the
attribution of each interval's energy, the workload counters, and the monitor that steps it all."""
