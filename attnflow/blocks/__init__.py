"""Blocks: the registered pieces that models are built from. Importing this registers them all."""

from attnflow.blocks import aggregators, attention, decoders, encoders, normalizers, scorers  # noqa: F401
from attnflow.blocks import positional  # noqa: F401,E402
from attnflow.blocks import graph  # noqa: F401,E402  (after scorers/aggregators: it builds them)
from attnflow.blocks import pooling  # noqa: F401,E402  (after scorers: attention pooling builds one)
