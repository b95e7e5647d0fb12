"""Helpers shared by the tests: waiting for a condition, stand-ins for the monitor's parts."""
