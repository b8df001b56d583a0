"""attnflow/blocks/dropout.py: inverted dropout (Srivastava et al. 2014) with a uniform-draw mask
on the CPU, against the definition r ~ Bernoulli(1 − p), ỹ = r·y/(1 − p); where a CUDA GPU is,
the same checks of torch's kernel, which the function hands a GPU tensor to."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from attnflow.blocks.dropout import Dropout, dropout

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="no CUDA device"))]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("p", [0.1, 0.3, 0.5])
def test_kept_units_are_scaled_and_the_keep_rate_is_one_minus_p(p, dtype, device):
    torch.manual_seed(0)
    x = torch.rand(400, 500, dtype=dtype, device=device) + 1.0  # no zeros: a zero output means dropped
    y = dropout(x, p)
    kept = y != 0
    torch.testing.assert_close(y[kept], (x[kept].float() / (1 - p)).to(dtype))
    n = kept.numel()
    rate = kept.float().mean().item()
    assert abs(rate - (1 - p)) < 5 * math.sqrt(p * (1 - p) / n)  # 5 standard errors of 200,000 draws
    # independent draws: neighbours are dropped together as often as chance says
    both = (kept[:, 1:] & kept[:, :-1]).float().mean().item()
    assert abs(both - (1 - p) ** 2) < 0.01


@pytest.mark.parametrize("device", DEVICES)
def test_the_gradient_is_the_same_mask_times_the_scale(device):
    torch.manual_seed(1)
    x = torch.randn(64, 24, 256, device=device, requires_grad=True)
    g = torch.randn_like(x)
    y = dropout(x, 0.3)
    y.backward(g)
    mask = (y != 0).float()
    torch.testing.assert_close(x.grad, g * mask / 0.7)
    torch.testing.assert_close(y, x.detach() * mask / 0.7)


def test_evaluation_and_p_zero_are_the_identity_and_p_one_drops_everything():
    x = torch.randn(5, 7)
    assert dropout(x, 0.5, training=False) is x and dropout(x, 0.0) is x
    assert torch.equal(dropout(x, 1.0), torch.zeros_like(x))
    layer = Dropout(0.5).eval()
    assert torch.equal(layer(x), x)


def test_the_layer_is_an_nn_dropout_and_draws_from_the_seeded_generator():
    layer = Dropout(0.3)
    assert isinstance(layer, nn.Dropout) and layer.p == 0.3 and repr(layer) == "Dropout(p=0.3, inplace=False)"
    x = torch.ones(1000)
    torch.manual_seed(7)
    a = layer(x)
    torch.manual_seed(7)
    b = layer(x)
    assert torch.equal(a, b)
    # the uniform mask, not torch's bernoulli_ stream: the same seed gives another mask
    torch.manual_seed(7)
    assert not torch.equal(a, F.dropout(x, 0.3))


def test_the_transformer_blocks_use_it():
    from attnflow.config.registry import DECODERS, ENCODERS

    heads = {"name": "multihead", "heads": 2}
    enc = ENCODERS.build({"name": "transformer_encoder", "d_model": 16, "layers": 1, "ffn_dim": 32,
                          "activation_dropout": 0.1, "attention": heads}, 16)
    dec = DECODERS.build({"name": "transformer_decoder", "d_model": 16, "layers": 1, "ffn_dim": 32,
                          "activation_dropout": 0.1, "attention": heads}, 11, 16, 16)
    drops = [m for m in [*enc.modules(), *dec.modules()] if isinstance(m, nn.Dropout)]
    # encoder: embeddings, residuals, FFN; decoder: embeddings, residuals, FFN
    assert len(drops) == 6 and all(type(m) is Dropout for m in drops)
