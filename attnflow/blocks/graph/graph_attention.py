"""Graph attention layer (GAT) with a pluggable scorer, as a PyG ``MessagePassing`` block.

Source: seed 000 ("графовые сети внимания"); Veličković et al. 2018, "Graph attention networks".
For node t with neighbourhood N(t) (its in-neighbours plus t itself: self-loops) and J heads::

    αʲ_{it} = SoftMax_{i ∈ N(t)} a_j(k = Wʲh_i, q = Wʲh_t)
    cʲ_t    = Σ_{i ∈ N(t)} αʲ_{it} Wʲh_i
    c_t     = aggregate(c¹_t … cᴶ_t) + b        (concat in hidden layers, mean in the output layer)

With the ``gat`` scorer a_j(k, q) = LeakyReLU(uʲᵀk + vʲᵀq) this is the paper's layer and equals
``torch_geometric.nn.GATConv`` given the same weights (W ↔ ``lin``, uʲ ↔ ``att_src[j]``,
vʲ ↔ ``att_dst[j]``, b ↔ ``bias``). Its score splits into per-node terms, so it is computed as
GATConv does: uʲᵀWʲh for every node once, (N, J), then gathered per edge. Any other scorer of the
``scorer`` registry (dot, scaled_dot, cosine, general, additive, mlp, const, …) scores each edge
(i → t) on per-edge tensors, (E, J, 1, d) — no E×E matrix; heads with parameters run as one
vectorised call (``torch.func.vmap`` over the J scorers' stacked parameters), never a loop.

The neighbourhood SoftMax is PyG's ``softmax`` (a scatter over target nodes); dropout on α
(attention dropout) is applied after it, as in the paper. Edges are (source, target) =
``edge_index[0], edge_index[1]`` (PyG's ``source_to_target`` flow).
"""

from __future__ import annotations

import math
from typing import Tuple

import torch
import torch.nn.functional as F
from torch import nn
from torch_geometric.nn import MessagePassing
from torch_geometric.utils import add_self_loops as _add_self_loops
from torch_geometric.utils import remove_self_loops, softmax

from attnflow.blocks.scorers.const import ConstScorer
from attnflow.blocks.scorers.gat import GATScorer
from attnflow.registry import AGGREGATORS, GRAPH_LAYERS, SCORERS, BlockSpec


def _glorot_(t: torch.Tensor, fan_in: int, fan_out: int) -> None:
    a = math.sqrt(6.0 / (fan_in + fan_out))
    with torch.no_grad():
        t.uniform_(-a, a)


@GRAPH_LAYERS.register("attention")
class GraphAttention(MessagePassing):
    """One graph attention layer: J heads of W (in_dim → out_dim), scored by ``scorer``.

    Args:
        in_dim: input features per node (context).
        out_dim: features per head, C (context).
        heads: J (default 1).
        scorer: the scorer config, one scorer per head (default ``{name: gat}``: the paper's).
        aggregator: how heads combine: ``concat`` (J·C) or ``mean`` (C) (default concat).
        dropout: attention dropout on α (default 0.0).
        value_dropout: dropout on the values Wʲh_i that α weighs (not on the scores): the
            reference implementation's second ``in_drop`` (``seq_fts``); 0 gives GATConv's layer
            (default 0.0).
        add_self_loops: include t in N(t) (existing self-loops are replaced by one) (default True).
        bias: add a learned bias after aggregation (default True).
    Shape:
        x (N, in_dim), edge_index (2, E) -> (N, aggregator.output_dim); with
        ``return_attention_weights=True`` also (edge_index with self-loops (2, E′), α (E′, J));
        α is the SoftMax before attention dropout, so it sums to 1 over each N(t).
    """

    def __init__(self, in_dim: int, out_dim: int, *, heads: int = 1,
                 scorer: BlockSpec["scorer"] = {"name": "gat"},  # noqa: B006
                 aggregator: BlockSpec["aggregator"] = {"name": "concat"},  # noqa: B006
                 dropout: float = 0.0, value_dropout: float = 0.0, add_self_loops: bool = True,
                 bias: bool = True):
        super().__init__(aggr="add", node_dim=0)
        if heads < 1 or out_dim < 1:
            raise ValueError(f"graph attention: heads and out_dim must be >= 1, got {heads}, {out_dim}")
        self.in_dim, self.out_dim, self.heads = in_dim, out_dim, heads
        self.dropout, self.value_dropout, self.add_self_loops = dropout, value_dropout, add_self_loops
        self.lin = nn.Linear(in_dim, heads * out_dim, bias=False)
        self.scorers = nn.ModuleList(SCORERS.build(scorer, out_dim, out_dim, path="scorer")
                                     for _ in range(heads))
        self.aggregator = AGGREGATORS.build(aggregator, heads, out_dim, heads * out_dim,
                                            path="aggregator")
        self.bias = nn.Parameter(torch.zeros(self.aggregator.output_dim)) if bias else None
        first = self.scorers[0]
        # the decomposable fast path: the paper's scorer without an extra projection
        self._fast_gat = isinstance(first, GATScorer) and first.W is None
        self._has_params = any(p.requires_grad for p in first.parameters())
        self.reset_parameters()

    @property
    def output_dim(self) -> int:
        return self.aggregator.output_dim

    def reset_parameters(self) -> None:
        super().reset_parameters()
        _glorot_(self.lin.weight, self.in_dim, self.heads * self.out_dim)  # as PyG's Linear
        if self._fast_gat:  # GATConv's glorot on att (1, J, C)
            for s in self.scorers:
                _glorot_(s.u, self.heads, self.out_dim)
                _glorot_(s.v, self.heads, self.out_dim)
        if self.bias is not None:
            nn.init.zeros_(self.bias)

    # -- edge scores -----------------------------------------------------------------------------
    def _gat_params(self) -> Tuple[torch.Tensor, torch.Tensor]:
        u = torch.stack([s.u for s in self.scorers])  # (J, C)
        v = torch.stack([s.v for s in self.scorers])
        return u, v

    def _edge_scores(self, h: torch.Tensor, src: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
        """Raw scores a_j(Wʲh_src, Wʲh_dst) per edge and head: (E, J)."""
        first = self.scorers[0]
        if self._fast_gat:
            u, v = self._gat_params()
            a_src = (h * u).sum(-1)  # (N, J): uʲᵀWʲh_i for every node once
            a_dst = (h * v).sum(-1)
            return F.leaky_relu(a_src[src] + a_dst[dst], first.negative_slope)
        if isinstance(first, ConstScorer):  # uniform weights: no per-edge features needed
            return h.new_zeros(src.numel(), self.heads)
        if first.sdpa_scale is not None and not self._has_params:  # s·kᵀq: dot, scaled_dot
            return first.sdpa_scale * (h[src] * h[dst]).sum(-1)
        k = h[src].unsqueeze(-2)  # (E, J, 1, C)
        q = h[dst].unsqueeze(-2)
        if not self._has_params:  # cosine and other parameter-free scorers: one call, all heads
            return first.score_prepared(q, first.prepare_keys(k)).reshape(k.shape[0], self.heads)
        # J scorers with parameters: one vectorised call over stacked per-head parameters
        names = [n for n, _ in first.named_parameters()]
        per_head = [dict(s.named_parameters()) for s in self.scorers]
        params = {n: torch.stack([p[n] for p in per_head]) for n in names}

        def one(p, qj, kj):
            return torch.func.functional_call(
                first, p, (qj, kj), kwargs=None, tie_weights=True, strict=False)

        out = torch.func.vmap(one)(params, q.transpose(0, 1), k.transpose(0, 1))  # (J, E, 1, 1)
        return out.reshape(self.heads, -1).t()

    # -- forward ---------------------------------------------------------------------------------
    def forward(self, x: torch.Tensor, edge_index: torch.Tensor,
                return_attention_weights: bool = False):
        N, J, C = x.shape[0], self.heads, self.out_dim
        h = self.lin(x).view(N, J, C)
        if self.add_self_loops:
            edge_index, _ = remove_self_loops(edge_index)
            edge_index, _ = _add_self_loops(edge_index, num_nodes=N)
        src, dst = edge_index[0], edge_index[1]
        alpha = softmax(self._edge_scores(h, src, dst), dst, num_nodes=N)  # (E, J)
        alpha_used = F.dropout(alpha, p=self.dropout, training=self.training)
        values = F.dropout(h, p=self.value_dropout, training=self.training) if self.value_dropout else h
        out = self.propagate(edge_index, x=values, alpha=alpha_used, size=(N, N))  # (N, J, C)
        out = self.aggregator(out.transpose(0, 1))  # (J, N, C) -> (N, D′)
        if self.bias is not None:
            out = out + self.bias
        if return_attention_weights:
            return out, (edge_index, alpha)
        return out

    def message(self, x_j: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
        return x_j * alpha.unsqueeze(-1)

    def extra_repr(self) -> str:
        return (f"in_dim={self.in_dim}, out_dim={self.out_dim}, heads={self.heads}, "
                f"dropout={self.dropout}, value_dropout={self.value_dropout}, add_self_loops={self.add_self_loops}")
