"""wattprobe: node power and GPU exporter with energy attributed to pods."""

__version__ = "0.1.0"
