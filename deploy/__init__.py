"""Deploy inputs: the manifests generator (generate.py) and the image builder (image/)."""
