"""Pooling over positions: (B, T, D) with a (B, T) mask -> (B, D), plus the weights used.

The hierarchical attention network (Yang et al. 2016) pools words into a sentence vector and
sentences into a document vector; its ablations swap the pooling: attention (HN-ATT), mean
(HN-AVE), max (HN-MAX).
"""
