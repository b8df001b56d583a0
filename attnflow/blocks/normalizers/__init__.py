"""Normalisers of attention scores: SoftMax and norm over a positive score."""
