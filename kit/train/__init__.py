"""Pretraining one ResNet with schedule-free AdamW (`python -m kit.train`): one rank's replica of
the model and its step (`step.Replica`), one run top to bottom (`trainer.train_run`), the checks
before it trains, stopping, checkpoints (and their reading back as frozen backbones,
`backbones`), metrics, and a run's settings."""
