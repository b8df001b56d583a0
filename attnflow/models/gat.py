"""GAT: a stack of graph attention layers for node classification.

Veličković et al. 2018 (transductive, §3.3): for Cora and CiteSeer 2 layers, J = 8 heads of
F′ = 8 concatenated then ELU, an output layer of 1 head (PubMed: 8, averaged); dropout 0.6 on
each layer's input and on α::

    h¹ = ELU(‖_{j=1..J} Σ_{i∈N(t)} αʲ_{it} Wʲ dropout(x)_i)
    z  = 1/J′ Σ_{j=1..J′} Σ_{i∈N(t)} αʲ_{it} W′ʲ dropout(h¹)_i         (logits)

``value_dropout`` drops the values once more, as the authors' code (``seq_fts``);
conf/model/gat.yaml sets 0.6 (Cora 83.4 ± 0.7 % over 10 seeds, docs/benchmarks.md).
"""

from __future__ import annotations

from typing import List, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from attnflow.blocks.normalizers.base import Normalized
from attnflow.blocks.graph.sparse_input import dropout_nonzero
from attnflow.config.contracts import ModelContract
from attnflow.config.registry import GRAPH_LAYERS, MODELS, BlockSpec, PositiveInt, Probability


@MODELS.register("gat")
class GAT(ModelContract, nn.Module):
    """Graph attention network: x (N, in_dim), edge_index (2, E) -> logits (N, num_classes).

    ``head_dropout``: draw the input dropout per head inside the layer (the authors' ``attn_head``)
    instead of one mask shared by the heads (PyG's GATConv).
    """

    interface = "graph"

    def __init__(self, in_dim: int, num_classes: int, *, layers: PositiveInt = 2,
                 hidden_dim: PositiveInt = 8,
                 heads: PositiveInt = 8, out_heads: PositiveInt = 1, dropout: Probability = 0.6,
                 attn_dropout: Probability = 0.6,
                 value_dropout: Probability = 0.0, head_dropout: bool = False,
                 scorer: BlockSpec["scorer"] = {"name": "gat"},  # noqa: B006
                 normalizer: BlockSpec["normalizer"] = {"name": "softmax"},  # noqa: B006
                 hidden_aggregator: BlockSpec["aggregator"] = {"name": "concat"},  # noqa: B006
                 output_aggregator: BlockSpec["aggregator"] = {"name": "mean"},  # noqa: B006
                 layer: str = "attention"):
        super().__init__()
        self.in_dim, self.num_classes, self.dropout = in_dim, num_classes, dropout
        self.head_dropout = head_dropout
        self.layers = nn.ModuleList()
        d = in_dim
        for i in range(layers):
            last = i == layers - 1
            cfg = {"name": layer, "heads": out_heads if last else heads, "scorer": scorer,
                   "normalizer": normalizer,
                   "aggregator": output_aggregator if last else hidden_aggregator,
                   "dropout": attn_dropout, "value_dropout": value_dropout,
                   "input_dropout": dropout if head_dropout else 0.0}
            block = GRAPH_LAYERS.build(cfg, d, num_classes if last else hidden_dim,
                                       path=f"model.layers[{i}]")
            if last and block.output_dim != num_classes:
                raise ValueError(
                    f"model 'gat': the output layer gives {block.output_dim} features with "
                    f"output_aggregator '{output_aggregator['name']}', need num_classes = "
                    f"{num_classes}; use output_aggregator=mean (or out_heads=1)")
            self.layers.append(block)
            d = block.output_dim

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor, need_weights: bool = False):
        """Logits (N, C); with ``need_weights`` also [(edge_index, α (E′, J))] per layer."""
        weights: List[Tuple[torch.Tensor, torch.Tensor]] = []
        for i, block in enumerate(self.layers):
            if i > 0:
                x = F.elu(x)
            if not self.head_dropout:  # else each head drops its own copy inside the layer
                x = dropout_nonzero(x, self.dropout, self.training)  # draws for nonzeros only
            if need_weights:
                x, w = block(x, edge_index, return_attention_weights=True)
                weights.append(w)
            else:
                x = block(x, edge_index)
        return (x, weights) if need_weights else x

    def diagnosed_attention(self):
        """[("neighbours", the output layer, None)]: its α over each node's incoming edges, by
        the normaliser's segment form (Jain & Wallace 2019; :mod:`attnflow.compare.jain_wallace`);
        [] for a layer without a normaliser."""
        last = self.layers[-1]
        return [("neighbours", last, None)] if isinstance(last, Normalized) else []
