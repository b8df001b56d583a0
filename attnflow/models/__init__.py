"""Models: compositions of blocks (SPEC §4)."""

from attnflow.models.gat import GAT
from attnflow.models.han import HierarchicalAttentionNetwork
from attnflow.models.self_attentive import SelfAttentive
from attnflow.models.seq2seq import Seq2Seq
from attnflow.models.transformer import Transformer

__all__ = ["GAT", "HierarchicalAttentionNetwork", "SelfAttentive", "Seq2Seq", "Transformer"]
