"""GAT: a stack of graph attention layers for node classification.

Source: Veličković et al. 2018, "Graph attention networks" (the transductive setting, §3.3).
Per the paper for Cora and CiteSeer: 2 layers; the hidden layer has J = 8 heads of F′ = 8
features, concatenated (64), followed by ELU; the output layer has 1 head (PubMed: 8, averaged)
with as many features as classes; dropout p = 0.6 on each layer's input and on α::

    h¹ = ELU(‖_{j=1..J} Σ_{i∈N(t)} αʲ_{it} Wʲ dropout(x)_i)
    z  = 1/J′ Σ_{j=1..J′} Σ_{i∈N(t)} αʲ_{it} W′ʲ dropout(h¹)_i         (logits; SoftMax in the task)

α is computed from the W·dropout(x) above; with ``value_dropout`` the values it weighs are dropped
once more, dropout(Wʲ dropout(x)_i), as the authors' TensorFlow code does (``seq_fts``); conf/model/
gat.yaml sets 0.6: Cora 83.4 ± 0.7 % over 10 seeds; without it, 82.8 ± 0.6 (5 seeds), and a plain
PyG GATConv loop 82.9 ± 0.8 (10 seeds) — docs/benchmarks.md.

The scorer (``${scorer}``: gat by default in the GAT experiments; ``const`` for Const-GAT), the
normaliser (``${normalizer}``: softmax as in the paper; any with a segment form, e.g. norm) and
the aggregators come from the registries.
"""

from __future__ import annotations

from typing import List, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from attnflow.blocks.graph.sparse_input import dropout_nonzero
from attnflow.config.registry import GRAPH_LAYERS, MODELS, BlockSpec, ConfigError, PositiveInt, Probability


@MODELS.register("gat")
class GAT(nn.Module):
    """Graph attention network.

    Args:
        in_dim: node feature size (context, from the data module).
        num_classes: output size (context, from the data module).
        layers: number of graph attention layers, >= 1 (default 2).
        hidden_dim: features per head in hidden layers, F′ (default 8).
        heads: heads of hidden layers (default 8).
        out_heads: heads of the output layer (default 1; the paper uses 8 on PubMed).
        dropout: dropout on every layer's input (default 0.6).
        attn_dropout: dropout on α (default 0.6).
        value_dropout: dropout on each layer's transformed features Wh before α weighs them, as
            the paper's reference code does besides the input dropout (default 0.0: PyG's GATConv).
        head_dropout: draw the input dropout (``dropout``) independently for each head, inside
            the layer, as the authors' ``attn_head`` does; false: one mask shared by the heads, as
            PyG's GATConv models (default False).
        scorer: scorer of every layer (default ``{name: gat}``).
        normalizer: normaliser of every layer, over each neighbourhood (default softmax).
        hidden_aggregator: heads of hidden layers (default concat).
        output_aggregator: heads of the output layer (default mean).
        layer: the graph layer block (default ``attention``: :class:`GraphAttention`).
    Shape: x (N, in_dim), edge_index (2, E) -> logits (N, num_classes).
    """

    interface = "graph"  # works on graph data (attnflow.training.validate.check_composition)

    @classmethod
    def check_config(cls, cfg: dict) -> None:
        """``model.layer`` names a graph layer."""
        if (cfg.get("model") or {}).get("name") == "gat":
            layer = cfg["model"]["layer"]
            try:
                GRAPH_LAYERS.get(layer)
            except ConfigError as err:
                raise ConfigError(f"model.layer (at 'model.layer'): {err}") from None

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
