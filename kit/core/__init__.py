"""The bottom layer: the parameter engine, paths, atomic and hashed files, locks, processes and
ranks, registries, progress bars. Imports nothing else of the kit."""
