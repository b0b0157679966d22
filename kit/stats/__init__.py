"""Statistics that need nothing of the pipeline: the group-sequential rule that judges a claim
after each round of replicates (`sequential`), the alpha-spending boundaries it rests on
(`spending`) and the simulation that checks its error rates and power (`simulation`)."""
