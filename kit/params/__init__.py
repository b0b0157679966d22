"""Parameters: layered, validated settings, and the registries of named kinds.

The engine that layers parameters/ and the command line and validates them (params,
strict_yaml, param_errors, bounds, sections), a running notebook's parameters
(kernel_params, parameters_cell), and the lookup of named kinds that refuses an unknown
one (registry). It names no notebook: each experiment registers its schema, and it
imports no torch. It may import kit.numerics, kit.readout and kit.files of the kit."""
