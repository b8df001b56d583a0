"""Models: compositions of blocks (SPEC §4)."""

from attnflow.models.seq2seq import Seq2Seq

__all__ = ["Seq2Seq"]
