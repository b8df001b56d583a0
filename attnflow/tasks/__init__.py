"""Tasks: LightningModules holding loss, metrics and decoding, registered in ``TASKS``."""

from attnflow.tasks.classification import ClassificationTask
from attnflow.tasks.seq2seq import Seq2SeqTask
from attnflow.tasks.translation import TranslationTask

__all__ = ["ClassificationTask", "Seq2SeqTask", "TranslationTask"]
from attnflow.tasks.node_classification import NodeClassificationTask  # noqa: E402,F401  (graph attention)
