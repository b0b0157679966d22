"""Linear probes of frozen representations, by name in `kit.probes.registry`.

Importing this package, `kit.probes.settings` or `kit.probes.registry` imports no torch, so
parameter validation stays fast; the probes themselves are imported on first use.
"""
