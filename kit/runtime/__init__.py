"""The machine and the processes a run is made of, and the provenance of what it produced.

What this machine can run, checked before compute (machine), processes and their signals
(processes), a process's rank in a distributed job (distributed), and the commit,
versions, machine and CPU numerics an output came from (provenance). It may import
kit.numerics, kit.readout and kit.files of the kit."""
