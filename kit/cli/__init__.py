"""The command line, `python -m kit ...`: the notebook runner, launch and step commands, the
parameter reference. The top layer: it may import every other."""
