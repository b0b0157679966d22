"""The time-concat experiment (paper Section 5.1, Table 3): settings and variant kinds, the plan
and its training, measurements, comparisons, figures, and its steps as jobs."""
