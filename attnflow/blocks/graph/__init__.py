"""Graph attention blocks (PyG ``MessagePassing``), registered in ``GRAPH_LAYERS``."""

from attnflow.registry import GRAPH_LAYERS
from attnflow.blocks.graph.graph_attention import GraphAttention

__all__ = ["GRAPH_LAYERS", "GraphAttention"]
