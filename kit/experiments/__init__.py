"""The notebooks' experiments: the toy counterexample (01), the surveyed evidence (02), the
time-concat experiment (03), each with its settings."""
