"""Templates shipped inside the package (importlib.resources: autotune.templates)."""
