"""Things wattprobe reads. Each module returns plain typed readings (exporter.model.readings)."""
