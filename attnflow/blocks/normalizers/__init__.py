"""Normalisers of attention scores (SPEC §1): SoftMax and norm over a positive score."""

from attnflow.blocks.normalizers.base import Normalizer
from attnflow.blocks.normalizers.norm import NormNormalizer
from attnflow.blocks.normalizers.softmax import SoftmaxNormalizer

__all__ = ["Normalizer", "NormNormalizer", "SoftmaxNormalizer"]
