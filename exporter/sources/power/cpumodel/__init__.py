"""Estimated node power from the CPU model and instance type (Boavizta's and CCF's tables).

lookup.estimate_for is the interface: it returns an Estimate (basis, CPU curve, memory curve).
"""
