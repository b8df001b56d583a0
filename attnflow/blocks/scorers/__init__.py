"""Attention scorers a(k, q) (SPEC §1), one per file, registered in ``SCORERS``."""

from attnflow.blocks.scorers.base import Scorer
from attnflow.blocks.scorers.dot import DotScorer
from attnflow.blocks.scorers.scaled_dot import ScaledDotScorer
from attnflow.blocks.scorers.cosine import CosineScorer
from attnflow.blocks.scorers.general import GeneralScorer
from attnflow.blocks.scorers.additive import AdditiveScorer
from attnflow.blocks.scorers.mlp import MLPScorer
from attnflow.blocks.scorers.gat import GATScorer
from attnflow.blocks.scorers.const import ConstScorer
from attnflow.blocks.scorers.gatv2 import GATv2Scorer

__all__ = ["Scorer", "DotScorer", "ScaledDotScorer", "CosineScorer", "GeneralScorer",
           "AdditiveScorer", "MLPScorer", "GATScorer", "GATv2Scorer", "ConstScorer"]
