"""Pretraining one ResNet with schedule-free AdamW (`python -m kit.train`): the step, the loop,
checkpoints, metrics, and a run's settings."""
