"""Training: one run from a composed config (validated once, then data, model, task and
Lightning Trainer), its run folder, checkpoints, resume, callbacks and loggers."""
