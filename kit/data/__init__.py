"""Images for training and probing: dataset kinds (one registry), the synthetic world, the
input pipeline, layout checks before compute, device prefetch, and their settings."""
