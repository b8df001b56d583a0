"""Dropout with a cheaper mask on the CPU (Srivastava et al. 2014, §2 and §10, "inverted" form).

In training each unit is kept with probability 1 − p and the kept ones are scaled so that the
expectation is unchanged; in evaluation it is the identity:

    r_i ~ Bernoulli(1 − p),    ỹ_i = r_i · y_i / (1 − p).

On the CPU torch's dropout draws r with ``bernoulli_``, which took 8–10 ns an element on one
thread (torch 2.13): the 32 masks of a training step of the d=256 3+3-layer Transformer (23 on
embeddings, residuals and FFN activations — this module's — and 9 on attention weights, drawn
inside ``scaled_dot_product_attention``) took about a fifth of the step. Here r_i = [u_i ≥ p] with u_i
drawn uniformly from [0, 1) in float32 by ``torch.rand`` (≈ 2.6 ns an element) — P(r_i = 1) = 1 − p,
the same distribution — and the backward multiplies by the same saved mask (one byte an element):
forward and backward together take 0.65–0.8 of torch's time (docs/benchmarks.md, "A faster CPU
step"). The random stream differs from torch's, so one seed gives other masks than ``nn.Dropout``.
On other devices (and for p = 1) torch's own kernel runs: on a GPU it is one fused pass.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class _UniformMaskDropout(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, p: float) -> torch.Tensor:
        keep = torch.rand(x.shape, dtype=torch.float32, device=x.device) >= p
        ctx.save_for_backward(keep)
        ctx.scale = 1.0 / (1.0 - p)
        return x * keep * ctx.scale

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (keep,) = ctx.saved_tensors
        return grad * keep * ctx.scale, None


def dropout(x: torch.Tensor, p: float, training: bool = True) -> torch.Tensor:
    """``F.dropout(x, p, training)``, with the uniform-draw mask above on the CPU."""
    if not training or p == 0.0:
        return x
    if x.device.type != "cpu" or p >= 1.0:
        return F.dropout(x, p, training=True)
    return _UniformMaskDropout.apply(x, p)


class Dropout(nn.Dropout):
    """``nn.Dropout(p)`` (it is one, for code that looks for dropout layers) that calls
    :func:`dropout`."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return dropout(x, self.p, self.training)
