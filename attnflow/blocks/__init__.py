"""Blocks: the registered pieces that models are built from. Importing this registers them all.

Order matters only in that blocks which build others (graph layers, pooling) come after the
scorers and aggregators they build."""

from attnflow.blocks import (aggregators, attention, decoders, encoders, normalizers,  # noqa: F401
                             positional, scorers)
from attnflow.blocks import graph, pooling  # noqa: F401
