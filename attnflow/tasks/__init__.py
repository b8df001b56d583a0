"""Tasks: LightningModules holding loss, metrics and decoding, registered in ``TASKS``."""

from attnflow.tasks.seq2seq import Seq2SeqTask

__all__ = ["Seq2SeqTask"]
