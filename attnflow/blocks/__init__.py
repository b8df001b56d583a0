"""Blocks: the registered pieces that models are built from. Importing this registers them all."""

from attnflow.blocks import aggregators, attention, decoders, encoders, normalizers, scorers  # noqa: F401
