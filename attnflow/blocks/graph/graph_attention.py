"""Graph attention layer (GAT) with a pluggable scorer, as a PyG ``MessagePassing`` block.

Veličković et al. 2018, §2.1, eq. (1)–(6). For node t with neighbourhood N(t) (self-loops
included) and J heads::

    αʲ_{it} = norm_{i ∈ N(t)} a_j(Wʲh_i, Wʲh_t),   cʲ_t = Σ_{i ∈ N(t)} αʲ_{it} Wʲh_i
    c_t     = aggregate(c¹_t … cᴶ_t) + b

With the ``gat`` scorer this equals ``torch_geometric.nn.GATConv`` given the same weights. A
``decomposable`` scorer is computed per node and gathered per edge (as GATConv); a
parameter-free s·kᵀq scorer is one product per edge; any other scores per-edge tensors (E, J, 1, d),
with the heads' scorers vmapped over their stacked parameters. α is normalised over each N(t)
by the normaliser's segment form, then dropped out (attention dropout).
"""

from __future__ import annotations

import math
from typing import Any, Callable, Dict, Sequence

import torch
import torch.nn.functional as F
from torch import nn
from torch_geometric.nn import MessagePassing
from torch_geometric.utils import add_self_loops as _add_self_loops
from torch_geometric.utils import remove_self_loops

from attnflow.config.registry import (AGGREGATORS, GRAPH_LAYERS, NORMALIZERS, SCORERS, BlockSpec,
                               ConfigError, PositiveInt, Probability)


def _glorot_(t: torch.Tensor, fan_in: int, fan_out: int) -> None:
    a = math.sqrt(6.0 / (fan_in + fan_out))
    with torch.no_grad():
        t.uniform_(-a, a)


class _Call(nn.Module):
    """``fn(scorer, *args)`` as a module's forward, so ``torch.func.functional_call`` can run any
    scorer method with swapped (per-head) parameters; its parameters are ``scorer.<name>``."""

    def __init__(self, scorer: nn.Module, fn: Callable):
        super().__init__()
        self.scorer, self.fn = scorer, fn

    def forward(self, *args):
        return self.fn(self.scorer, *args)


@GRAPH_LAYERS.register("attention")
class GraphAttention(MessagePassing):
    """One graph attention layer: J heads of W (in_dim → out_dim), scored by ``scorer``.

    ``value_dropout`` drops Wʲh_i before α weighs them and ``input_dropout`` drops x with a mask
    per head, as the authors' TensorFlow code (``seq_fts``, ``attn_head``); 0 gives GATConv.
    Shape: x (N, in_dim), edge_index (2, E) -> (N, output_dim); with
    ``return_attention_weights`` also (edge_index with self-loops, α (E′, J)) before dropout.
    """

    def __init__(self, in_dim: int, out_dim: int, *, heads: PositiveInt = 1,
                 scorer: BlockSpec["scorer"] = {"name": "gat"},  # noqa: B006
                 aggregator: BlockSpec["aggregator"] = {"name": "concat"},  # noqa: B006
                 normalizer: BlockSpec["normalizer"] = {"name": "softmax"},  # noqa: B006
                 dropout: Probability = 0.0, value_dropout: Probability = 0.0,
                 input_dropout: Probability = 0.0,
                 add_self_loops: bool = True, bias: bool = True):
        super().__init__(aggr="add", node_dim=0)
        self.in_dim, self.out_dim, self.heads = in_dim, out_dim, heads
        self.dropout, self.value_dropout, self.add_self_loops = dropout, value_dropout, add_self_loops
        self.input_dropout = input_dropout
        self.lin = nn.Linear(in_dim, heads * out_dim, bias=False)
        self.scorers = nn.ModuleList(SCORERS.build(scorer, out_dim, out_dim, path="scorer")
                                     for _ in range(heads))
        self.aggregator = AGGREGATORS.build(aggregator, heads, out_dim, heads * out_dim,
                                            path="aggregator")
        self.normalizer = NORMALIZERS.build(normalizer, path="normalizer")
        if not self.normalizer.has_segment_form():
            with_form = [n for n in NORMALIZERS.names() if NORMALIZERS.get(n).has_segment_form()]
            raise ConfigError(
                f"graph attention: normalizer '{self.normalizer.registry_name}' (at 'normalizer') "
                f"has no segment form over a node's edges; normalisers with one: "
                f"{', '.join(with_form)}")
        self.bias = nn.Parameter(torch.zeros(self.aggregator.output_dim)) if bias else None
        first = self.scorers[0]
        self._has_params = any(p.requires_grad for p in first.parameters())
        self.reset_parameters()

    @property
    def output_dim(self) -> int:
        return self.aggregator.output_dim

    def reset_parameters(self) -> None:
        super().reset_parameters()
        _glorot_(self.lin.weight, self.in_dim, self.heads * self.out_dim)  # as PyG's Linear
        for s in self.scorers:  # e.g. gat: GATConv's glorot on att (1, J, C)
            s.reset_parameters(self.heads)
        if self.bias is not None:
            nn.init.zeros_(self.bias)

    # -- edge scores -----------------------------------------------------------------------------
    def _per_head(self, fn: Callable, args: Sequence[torch.Tensor], in_dims: Sequence[int],
                  out_dims: int) -> Any:
        """``fn(scorer_j, *args_j)`` for the J heads' scorers in one vectorised call: ``vmap``
        over their stacked parameters and over axis ``in_dims[i]`` of ``args[i]``."""
        first = self.scorers[0]
        names = [n for n, _ in first.named_parameters()]
        per_head = [dict(s.named_parameters()) for s in self.scorers]
        params: Dict[str, torch.Tensor] = {
            f"scorer.{n}": torch.stack([p[n] for p in per_head]) for n in names}
        call = _Call(first, fn)

        def one(p, *a):
            return torch.func.functional_call(call, p, a, tie_weights=True, strict=False)

        return torch.func.vmap(one, in_dims=(0, *in_dims), out_dims=out_dims)(params, *args)

    def _edge_scores(self, h: torch.Tensor, src: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
        """Raw scores a_j(Wʲh_src, Wʲh_dst) per edge and head: (E, J)."""
        first = self.scorers[0]
        if first.decomposable:  # per-node terms once (N, J), gathered per edge, as GATConv
            return self._decomposed_scores(h, src, dst)
        if first.sdpa_scale is not None and not self._has_params:  # s·kᵀq: dot, scaled_dot
            return first.sdpa_scale * (h[src] * h[dst]).sum(-1)
        k = h[src].unsqueeze(-2)  # (E, J, 1, C)
        q = h[dst].unsqueeze(-2)
        if not self._has_params:  # cosine and other parameter-free scorers: one call, all heads
            return first.score_prepared(q, first.prepare_keys(k)).reshape(k.shape[0], self.heads)
        # J scorers with parameters: one vectorised call over stacked per-head parameters
        out = self._per_head(lambda s, qj, kj: s(qj, kj), (q, k), in_dims=(1, 1), out_dims=0)
        return out.reshape(self.heads, -1).t()  # (J, E, 1, 1) -> (E, J)

    def _decomposed_scores(self, h: torch.Tensor, src: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
        """combine_j(f_j(Wʲh_src), g_j(Wʲh_dst)): f, g per node (N, J), gathered per edge."""
        first = self.scorers[0]
        if not self._has_params:  # every head's scorer is the same function: all heads at once
            a_src, a_dst = first.key_terms(h), first.query_terms(h)  # (N, J)
        elif self.heads == 1:
            a_src, a_dst = first.key_terms(h[:, 0]), first.query_terms(h[:, 0])  # (N,)
            return first.combine_terms(a_src[src], a_dst[dst]).unsqueeze(-1)
        else:  # the class's batched form, else one vmapped call over the heads' parameters
            terms = type(first).stacked_terms(self.scorers, h)
            if terms is None:
                terms = self._per_head(lambda s, x: (s.key_terms(x), s.query_terms(x)), (h,),
                                       in_dims=(1,), out_dims=1)
            a_src, a_dst = terms  # (N, J) each
        return first.combine_terms(a_src[src], a_dst[dst])  # parameter-free: all heads at once

    # -- forward ---------------------------------------------------------------------------------
    def _head_dropped_lin(self, x: torch.Tensor) -> torch.Tensor:
        """Wʲ dropoutʲ(x) for every head j, each with its own mask: (N, J, C); a sparse x gets
        masks for its nonzero entries only (a dropped zero changes nothing)."""
        N, F_in = x.shape
        J, C, p = self.heads, self.out_dim, self.input_dropout
        W = self.lin.weight.view(J, C, F_in)
        rows, cols = x.nonzero(as_tuple=True)
        if rows.numel() * C < N * F_in:  # sparse input: per-entry masks, scattered into rows
            keep = torch.empty(rows.numel(), J, device=x.device).bernoulli_(1 - p).div_(1 - p)
            terms = (x[rows, cols].unsqueeze(-1) * keep).unsqueeze(-1) * W.permute(2, 0, 1)[cols]
            return x.new_zeros(N, J, C).index_add_(0, rows, terms)  # (nnz, J, C) summed per row
        xs = F.dropout(x.unsqueeze(0).expand(J, N, F_in), p=p, training=True)  # (J, N, F)
        return torch.bmm(xs, W.transpose(1, 2)).transpose(0, 1)

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor,
                return_attention_weights: bool = False):
        N, J, C = x.shape[0], self.heads, self.out_dim
        if self.input_dropout and self.training:
            h = self._head_dropped_lin(x)
        else:
            h = self.lin(x).view(N, J, C)
        if self.add_self_loops:
            edge_index, _ = remove_self_loops(edge_index)
            edge_index, _ = _add_self_loops(edge_index, num_nodes=N)
        src, dst = edge_index[0], edge_index[1]
        alpha = self.normalizer.normalize_segments(self._edge_scores(h, src, dst), dst, N)  # (E, J)
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
                f"dropout={self.dropout}, value_dropout={self.value_dropout}, "
                f"input_dropout={self.input_dropout}, add_self_loops={self.add_self_loops}")
