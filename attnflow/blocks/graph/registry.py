"""The registry of graph layers (kind ``graph_layer``): message-passing blocks that map
(x (N, F), edge_index (2, E)) -> (N, D′). Models name a layer by its registered name."""

from attnflow.registry import Registry

GRAPH_LAYERS = Registry("graph_layer")
