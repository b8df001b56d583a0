"""The FlexAttention path: its forward equals the explicit path (float32, 1e-5) for every scorer
that declares it (dot products and decomposable scores), with padding, causal and window masks and
Shaw et al.'s relative positions; backends a block cannot run are refused when it is built; on
CUDA forward and backward agree within bf16 tolerance (skipped without a GPU)."""

from __future__ import annotations

import pytest
import torch

from attnflow.blocks.attention import flex as flex_module
from attnflow.blocks.attention.functional import choose_path
from attnflow.config.registry import ATTENTIONS, ConfigError

SCORERS = ["dot", "scaled_dot", "cosine", "general", "gat", "const"]
MASKS = ["none", "padding", "causal", "padding+causal"]


@pytest.fixture(autouse=True)
def flex_calls(monkeypatch):
    """The FlexAttention calls made in a test (each test that compares paths checks there was one)."""
    calls, kernel = [], flex_module.flex

    def counted(*args, **kwargs):
        calls.append(kwargs.get("score_mod"))
        return kernel(*args, **kwargs)

    monkeypatch.setattr(flex_module, "flex", counted)
    return calls


def twins(cfg, *dims, dtype=torch.float32):
    """The same block (same parameters) with backend=flex and backend=explicit."""
    torch.manual_seed(0)
    flex = ATTENTIONS.build({**cfg, "backend": "flex"}, *dims).to(dtype).eval()
    explicit = ATTENTIONS.build({**cfg, "backend": "explicit"}, *dims).to(dtype).eval()
    explicit.load_state_dict(flex.state_dict())
    return flex, explicit


def inputs(kind, b=2, t=12, d=32, dtype=torch.float32):
    torch.manual_seed(1)
    x = torch.randn(b, t, d, dtype=dtype)
    mask = None
    if "padding" in kind:
        mask = (torch.arange(t) < torch.tensor([t, t - 5]).unsqueeze(1)).unsqueeze(1)  # (B, 1, T)
    return x, mask, "causal" in kind


@pytest.mark.slow
@pytest.mark.parametrize("scorer", SCORERS)
@pytest.mark.parametrize("kind", MASKS)
def test_multihead_flex_equals_explicit(scorer, kind, flex_calls):
    flex, explicit = twins({"name": "multihead", "heads": 4, "scorer": {"name": scorer}}, 32, 32, 32)
    x, mask, causal = inputs(kind)
    with torch.no_grad():
        got, _ = flex(x, x, x, mask, causal=causal)
        want, _ = explicit(x, x, x, mask, causal=causal)
    assert len(flex_calls) == 1
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("scorer", ["dot", "general", "gat"])
def test_single_head_flex_with_a_window_mask(scorer, flex_calls):
    """Luong-style local windows: key i is seen from query t when |i − p_t| ≤ D (Luong et al.
    2015, §3.2), here p_t = t and D = 2, as a mask over a (B, Tq, Tk) cross-attention."""
    flex, explicit = twins({"name": "single", "scorer": {"name": scorer}}, 16, 16, 8)
    torch.manual_seed(2)
    q, k, v = torch.randn(2, 6, 16), torch.randn(2, 9, 16), torch.randn(2, 9, 8)
    window = (torch.arange(9) - torch.arange(6).unsqueeze(1)).abs() <= 2
    with torch.no_grad():
        got, _ = flex(q, k, v, window.expand(2, 6, 9))
        want, _ = explicit(q, k, v, window.expand(2, 6, 9))
    assert len(flex_calls) == 1
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("kind", MASKS)
@pytest.mark.parametrize("scorer,distance", [("scaled_dot", 3), ("dot", 1), ("scaled_dot", 20)])
def test_relative_positions_on_flex_equal_explicit(kind, scorer, distance, flex_calls):
    """Both of Shaw et al.'s terms: δ = 1 (one band entry), 3, and 20 > T (no clipped tails)."""
    cfg = {"name": "relative_multihead", "max_distance": distance, "heads": 2,
           "scorer": {"name": scorer}}
    flex, explicit = twins(cfg, 16, 16, 16, True)
    x, mask, causal = inputs(kind, d=16)
    with torch.no_grad():
        got, _ = flex(x, x, x, mask, causal=causal)
        want, _ = explicit(x, x, x, mask, causal=causal)
    assert len(flex_calls) == 2 and all(flex_calls)  # the row and its left tail, with score_mod
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("cfg,match", [
    ({"backend": "flex", "scorer": {"name": "additive"}}, "dot-product or decomposable"),
    ({"backend": "flex", "scorer": {"name": "gatv2"}}, "not 'gatv2'"),
    ({"backend": "flex", "dropout": 0.1}, "no dropout"),
    ({"backend": "sdpa", "scorer": {"name": "gat"}}, "dot-product scorer"),
    ({"backend": "flex", "normalizer": {"name": "norm"}}, "softmax normaliser"),
    ({"backend": "sdpa", "name": "relative_multihead"}, "no relative-position terms"),
    ({"backend": "flex", "name": "relative_multihead", "scorer": {"name": "cosine"}},
     "scaled_dot or dot"),
])
def test_backends_a_block_cannot_run_are_refused_when_built(cfg, match):
    with pytest.raises(ConfigError, match=match):
        ATTENTIONS.build({"name": "multihead", "heads": 2, **cfg}, 8, 8, 8, True)


@pytest.mark.parametrize("scorer,path", [("scaled_dot", "sdpa"), ("cosine", "sdpa"),
                                         ("general", "sdpa"), ("gat", "explicit"),
                                         ("additive", "explicit")])
def test_auto_on_the_cpu_takes_sdpa_or_explicit_never_flex(scorer, path):
    """FlexAttention has no backward on the CPU (torch 2.13): auto leaves it to CUDA."""
    block = ATTENTIONS.build({"name": "multihead", "heads": 2, "scorer": {"name": scorer}}, 8, 8, 8)
    q = torch.randn(1, 2, 3, 4)
    assert choose_path("auto", block.scorer, block.normalizer, q, 0.0, False) == path
    assert choose_path("auto", block.scorer, block.normalizer, q, 0.0, True) == "explicit"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("scorer", SCORERS + ["relative"])
def test_cuda_flex_forward_and_backward_agree_with_explicit_in_bf16(scorer):
    cfg = {"name": "multihead", "heads": 4, "scorer": {"name": scorer}}
    if scorer == "relative":
        cfg = {"name": "relative_multihead", "max_distance": 4, "heads": 4}
    flex, explicit = (m.cuda() for m in twins(cfg, 64, 64, 64, True))
    x, mask, causal = inputs("padding+causal", t=128, d=64)
    x, mask = x.cuda(), mask.cuda()
    grads = []
    for block in (flex, explicit):
        xi = x.clone().requires_grad_()
        with torch.autocast("cuda", torch.bfloat16):
            out, _ = block(xi, xi, xi, mask, causal=causal)
        out.float().square().mean().backward()
        grads.append((out.float(), xi.grad, [p.grad for p in block.parameters()]))
    (o1, g1, p1), (o2, g2, p2) = grads
    torch.testing.assert_close(o1, o2, rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(g1, g2, rtol=5e-2, atol=5e-3)
    for a, b in zip(p1, p2):
        if a is not None:
            torch.testing.assert_close(a, b, rtol=5e-2, atol=5e-3)
