"""Tasks: LightningModules holding loss, metrics and decoding, registered in ``TASKS``."""
