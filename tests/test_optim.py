"""The shared optimisers and schedules (attnflow/tasks/optim.py) against their formulas."""

import math

import pytest
import torch

from attnflow.tasks import optim


@pytest.mark.parametrize("w", [1, 10, 4000])
def test_noam_is_vaswanis_schedule_normalised_to_peak_one(w):
    d = 512
    vaswani = lambda s: d ** -0.5 * min(s ** -0.5, s * w ** -1.5)  # noqa: E731
    f = optim.lr_factor("noam", 0, w)
    for s in (1, 2, w // 2 or 1, w, 2 * w, 10 * w):
        assert f(s) == pytest.approx(vaswani(s) / vaswani(w))
    assert f(w) == pytest.approx(1.0)
    assert f(0) == f(1)  # Lightning's first step is 0


def test_cosine_goes_from_one_to_zero():
    f = optim.lr_factor("cosine", 100)
    assert f(0) == pytest.approx(1.0)
    assert f(50) == pytest.approx(0.5)
    assert f(25) == pytest.approx(0.5 * (1 + math.cos(math.pi / 4)))
    assert f(100) == pytest.approx(0.0) and f(500) == pytest.approx(0.0)


def test_optimizers_by_name_and_bad_names():
    p = [torch.nn.Parameter(torch.zeros(2))]
    assert isinstance(optim.make_optimizer(p, "adam", 0.1, 0.0), torch.optim.Adam)
    assert isinstance(optim.make_optimizer(p, "adamw", 0.1, 0.0), torch.optim.AdamW)
    sgd = optim.make_optimizer(p, "sgd", 0.1, 0.0)
    assert isinstance(sgd, torch.optim.SGD) and sgd.defaults["momentum"] == 0.9
    with pytest.raises(ValueError, match="optimizer must be one of adam, adamw, sgd, got 'adagrad'"):
        optim.make_optimizer(p, "adagrad", 0.1, 0.0)
    with pytest.raises(ValueError, match="scheduler must be one of"):
        optim.lr_factor("step", 10)


def test_linear_warms_up_then_decays_to_zero_as_devlin_et_al():
    w, total = 10, 110
    f = optim.lr_factor("linear", total, w)
    for s in (1, 5, 9):
        assert f(s) == pytest.approx(s / w)
    assert f(0) == f(1)  # Lightning's first step is 0: no step is taken at lr 0
    assert f(w) == pytest.approx(1.0)
    assert f(60) == pytest.approx(0.5)  # halfway through the 100 decay steps
    assert f(total) == 0.0 and f(total + 50) == 0.0


def test_bias_and_norm_parameters_go_without_weight_decay():
    net = torch.nn.Sequential(torch.nn.Embedding(7, 4), torch.nn.Linear(4, 3), torch.nn.LayerNorm(3))
    decayed, plain = optim.param_groups(net, 0.01)
    assert decayed["weight_decay"] == 0.01 and plain["weight_decay"] == 0.0
    ids = lambda group: {id(p) for p in group["params"]}  # noqa: E731
    assert ids(decayed) == {id(net[0].weight), id(net[1].weight)}
    assert ids(plain) == {id(net[1].bias), id(net[2].weight), id(net[2].bias)}
    # AdamW applies the decoupled decay to the first group only: with zero gradients, a decayed
    # weight shrinks by lr·wd and a bias stays
    for p in net.parameters():
        p.grad = torch.zeros_like(p)
    before = [p.detach().clone() for p in (net[1].weight, net[1].bias)]
    opt = optim.make_optimizer([decayed, plain], "adamw", 0.1, 0.01)
    opt.step()
    assert torch.allclose(net[1].weight, before[0] * (1 - 0.1 * 0.01))
    assert torch.equal(net[1].bias, before[1])
