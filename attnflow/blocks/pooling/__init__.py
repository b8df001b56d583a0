"""Pooling over positions: (B, T, D) with a (B, T) mask -> (B, D), plus the weights used.

The hierarchical attention network (Yang et al. 2016) pools words into a sentence vector and
sentences into a document vector; its ablations swap the pooling: attention (HN-ATT), mean
(HN-AVE), max (HN-MAX).
"""

from attnflow.blocks.pooling.attention import AttentionPooling
from attnflow.blocks.pooling.max import MaxPooling
from attnflow.blocks.pooling.mean import MeanPooling

__all__ = ["AttentionPooling", "MaxPooling", "MeanPooling"]
