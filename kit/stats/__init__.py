"""Statistics that need nothing of the pipeline: the group-sequential rule that judges a claim
after each round of replicates (`sequential`), the alpha-spending boundaries it rests on
(`spending`), the simulation that checks its error rates and power (`simulation`) and the
`rounds` block of a notebook's parameters that sets a plan of rounds (`settings`)."""
