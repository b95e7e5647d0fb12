"""Prometheus rules for wattprobe: wattprobe.rules.yml is the source; generate.py wraps it."""
