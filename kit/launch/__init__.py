"""Starting runs and steps: inline, pinned local workers, one torchrun per worker, or a Slurm array
through submitit; the sbatch export; progress read from each run's metrics."""
