"""Tasks: LightningModules holding loss, metrics and decoding, registered in ``TASKS``."""

from attnflow.tasks.classification import ClassificationTask
from attnflow.tasks.node_classification import NodeClassificationTask
from attnflow.tasks.seq2seq import Seq2SeqTask
from attnflow.tasks.translation import TranslationTask

__all__ = ["ClassificationTask", "NodeClassificationTask", "Seq2SeqTask", "TranslationTask"]
