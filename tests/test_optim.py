"""The shared optimisers and schedules (attnflow/tasks/optim.py) against their formulas."""

import math
from types import SimpleNamespace

import pytest
import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import Timer

from attnflow.config.registry import ConfigError
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


def test_optimizers_by_name():
    p = [torch.nn.Parameter(torch.zeros(2))]
    assert isinstance(optim.make_optimizer(p, "adam", 0.1, 0.0), torch.optim.Adam)
    assert isinstance(optim.make_optimizer(p, "adamw", 0.1, 0.0), torch.optim.AdamW)
    sgd = optim.make_optimizer(p, "sgd", 0.1, 0.0)
    assert isinstance(sgd, torch.optim.SGD) and sgd.defaults["momentum"] == 0.9


def _hand_steps(name, w, grads, lr=0.01, wd=0.1, b1=0.9, b2=0.999, eps=1e-8):
    """The updates by their papers, in float64: Adam (Kingma & Ba 2015, Algorithm 1) with the L2
    term in the gradient, AdamW (Loshchilov & Hutter 2019, Algorithm 2: θ ← θ − lr·λθ − lr·m̂/(√v̂
    + ε)), SGD with momentum 0.9 (PyTorch's form: b ← 0.9b + g, θ ← θ − lr·b)."""
    m = v = b = torch.zeros_like(w)
    for t, g in enumerate(grads, 1):
        if name == "sgd":
            g = g + wd * w
            b = g if t == 1 else 0.9 * b + g
            w = w - lr * b
            continue
        if name == "adam":
            g = g + wd * w
        else:
            w = w - lr * wd * w
        m, v = b1 * m + (1 - b1) * g, b2 * v + (1 - b2) * g * g
        w = w - lr * (m / (1 - b1 ** t)) / ((v / (1 - b2 ** t)).sqrt() + eps)
    return w


@pytest.mark.parametrize("name", ["adam", "adamw", "sgd"])
def test_the_fused_optimizers_take_their_papers_steps(name):
    torch.manual_seed(0)
    w0 = torch.randn(4, 3, dtype=torch.float64)
    grads = [torch.randn(4, 3, dtype=torch.float64) for _ in range(5)]
    p = torch.nn.Parameter(w0.clone())
    opt = optim.make_optimizer([p], name, 0.01, 0.1)
    assert opt.defaults["fused"] is True  # one kernel over all parameters, not a loop over them
    for g in grads:
        p.grad = g.clone()
        opt.step()
    torch.testing.assert_close(p.detach(), _hand_steps(name, w0, grads), rtol=1e-12, atol=1e-12)


def test_fused_only_where_the_run_can_clip_its_gradients():
    from pytorch_lightning.plugins.precision import DeepSpeedPrecision, HalfPrecision, MixedPrecision, Precision

    def fits(plugin, clip):
        return optim.fused_fits(SimpleNamespace(gradient_clip_val=clip, precision_plugin=plugin))

    fp16 = MixedPrecision("16-mixed", "cpu")  # a GradScaler: it unscales inside a fused step
    assert fp16.scaler is not None and not fits(fp16, 1.0)
    assert fits(fp16, None) and fits(fp16, 0.0)  # nothing to clip: fused with the scaler is fine
    assert fits(MixedPrecision("bf16-mixed", "cpu"), 1.0)  # no scaler: the task clips
    assert fits(Precision(), 1.0) and fits(HalfPrecision("bf16-true"), 1.0)
    assert not fits(DeepSpeedPrecision("32-true"), 1.0)  # its own clipping
    assert optim.fused_fits(None)


def test_linear_warms_up_then_decays_to_zero_as_devlin_et_al():
    w, total = 10, 110
    f = optim.lr_factor("linear", total, w)
    for s in (1, 5, 9):
        assert f(s) == pytest.approx(s / w)
    assert f(0) == f(1)  # Lightning's first step is 0: no step is taken at lr 0
    assert f(w) == pytest.approx(1.0)
    assert f(60) == pytest.approx(0.5)  # halfway through the 100 decay steps
    assert f(total) == 0.0 and f(total + 50) == 0.0


def test_constant_with_warmup_rises_linearly_then_holds_the_peak():
    w = 8
    f = optim.lr_factor("constant_with_warmup", 0, w)  # needs no step count: holds to any end
    assert [f(s) for s in (1, 2, 4, 7)] == pytest.approx([1 / 8, 2 / 8, 4 / 8, 7 / 8])
    assert f(0) == f(1)  # Lightning's first step is 0: no step is taken at lr 0
    assert f(w) == 1.0 and f(10 * w) == 1.0 and f(10 ** 6) == 1.0
    noam = optim.lr_factor("noam", 0, w)
    assert f(4 * w) == pytest.approx(2 * noam(4 * w))  # noam has fallen to √(w/s) = ½ by then


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


# -- the cool-down: linear to zero over the last fraction of the run (steps or time box) --------
def test_cooldown_is_one_then_falls_linearly_to_zero():
    for p in (0.0, 0.5, 0.8):
        assert optim.cooldown_factor(0.2, p) == 1.0
    assert optim.cooldown_factor(0.2, 0.9) == pytest.approx(0.5)
    assert optim.cooldown_factor(0.2, 0.95) == pytest.approx(0.25)
    assert optim.cooldown_factor(0.2, 1.0) == 0.0
    assert optim.cooldown_factor(0.0, 0.99) == 1.0  # 0: none


class _Clock(Timer):
    """Lightning's Timer with a settable elapsed time (what a run of ``duration`` s has used)."""

    def __init__(self, duration: float):
        super().__init__(duration={"seconds": duration})
        self.now = 0.0

    def time_elapsed(self, stage="train"):
        return self.now


def test_progress_is_the_larger_of_steps_and_time_box():
    clock = _Clock(1000)
    trainer = SimpleNamespace(estimated_stepping_batches=200, callbacks=[clock])
    progress = optim.run_progress(trainer)
    assert progress(50) == pytest.approx(0.25)  # no time used: steps say 50/200
    clock.now = 600
    assert progress(50) == pytest.approx(0.6)  # the time box ends the run first
    clock.now = 2000
    assert progress(50) == 1.0
    # max_time alone (max_epochs=-1: no step count)
    clock.now = 300
    timed = optim.run_progress(SimpleNamespace(estimated_stepping_batches=math.inf, callbacks=[clock]))
    assert timed(10_000) == pytest.approx(0.3)


def test_cooldown_without_an_end_is_refused():
    trainer = SimpleNamespace(estimated_stepping_batches=math.inf, callbacks=[Timer()])  # no duration
    with pytest.raises(ConfigError, match=r"task\.optim\.cooldown needs the run's end.*max_time"):
        optim.run_progress(trainer)


def test_cooldown_multiplies_the_schedule_in_a_time_boxed_run():
    clock = _Clock(100)
    net = torch.nn.Linear(2, 2)
    module = SimpleNamespace(parameters=net.parameters,
                             trainer=SimpleNamespace(estimated_stepping_batches=math.inf, callbacks=[clock]))
    cfg = optim.OptimConfig(lr=0.5, scheduler="noam", warmup_steps=4, cooldown=0.25)
    out = optim.configure(module, cfg)
    opt, sched = out["optimizer"], out["lr_scheduler"]["scheduler"]
    seen = []
    for step in range(1, 9):
        clock.now = 10.0 * step  # 10 s a step: the 100-s box ends at step 10, cool-down from 75 s
        opt.step()
        sched.step()
        seen.append(opt.param_groups[0]["lr"])
    noam = lambda s: min(s / 4, math.sqrt(4 / s))  # noqa: E731
    expect = [0.5 * noam(s) * min(1.0, (1 - s / 10) / 0.25) for s in range(1, 9)]
    assert seen == pytest.approx(expect)
    assert seen[-1] == pytest.approx(0.5 * noam(8) * 0.8)  # 80 s of 100: (1 − 0.8)/0.25


class _Recorder(pl.LightningModule):
    def __init__(self, cfg):
        super().__init__()
        self.net, self.cfg, self.lrs = torch.nn.Linear(2, 1), cfg, []

    def training_step(self, batch, _):
        self.lrs.append(self.optimizers().param_groups[0]["lr"])
        return self.net(batch).sum()

    def train_dataloader(self):
        return torch.utils.data.DataLoader(torch.ones(8, 2), batch_size=2)  # 4 steps an epoch

    def configure_optimizers(self):
        return optim.configure(self, self.cfg)


def test_cooldown_ends_a_lightning_run_at_zero(tmp_path):
    module = _Recorder(optim.OptimConfig(lr=1.0, cooldown=0.5))  # scheduler 'none'
    pl.Trainer(max_epochs=3, logger=False, enable_checkpointing=False, enable_progress_bar=False,
               enable_model_summary=False, default_root_dir=tmp_path).fit(module)
    assert module.lrs == pytest.approx([min(1.0, (1 - s / 12) / 0.5) for s in range(12)])


def test_warmup_stable_decay_in_a_lightning_run(tmp_path):
    """constant_with_warmup + cooldown: up over w steps, the peak, then linearly down to 0."""
    module = _Recorder(optim.OptimConfig(lr=1.0, scheduler="constant_with_warmup", warmup_steps=2,
                                         cooldown=0.5))
    pl.Trainer(max_epochs=3, logger=False, enable_checkpointing=False, enable_progress_bar=False,
               enable_model_summary=False, default_root_dir=tmp_path).fit(module)
    expected = [min(1.0, max(s, 1) / 2) * min(1.0, (1 - s / 12) / 0.5) for s in range(12)]
    assert module.lrs == pytest.approx(expected)
    assert module.lrs[:3] == pytest.approx([0.5, 0.5, 1.0]) and module.lrs[6] == pytest.approx(1.0)


@pytest.mark.parametrize("cfg, curves", [
    (optim.OptimConfig(lr=0.5), {"lr"}),  # scheduler none: a constant schedule, named as the rest
    (optim.OptimConfig(lr=0.5, scheduler="noam", warmup_steps=2, decay_bias_and_norm=False),
     {"lr/decay", "lr/no_decay"}),
])
def test_learning_rate_curves_are_named_lr_or_by_parameter_group(tmp_path, cfg, curves):
    """Lightning's LearningRateMonitor names each curve by the schedule and parameter group."""
    import csv

    from pytorch_lightning.callbacks import LearningRateMonitor
    from pytorch_lightning.loggers import CSVLogger

    module = _Recorder(cfg)
    pl.Trainer(max_epochs=1, logger=CSVLogger(tmp_path), log_every_n_steps=1, enable_checkpointing=False,
               enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path,
               callbacks=[LearningRateMonitor(logging_interval="step")]).fit(module)
    with open(next(tmp_path.rglob("metrics.csv"))) as f:
        rows = list(csv.DictReader(f))
    assert set(rows[0]) - {"epoch", "step"} == curves
    want = [0.5 * (optim.lr_factor(cfg.scheduler, 4, cfg.warmup_steps)(s)) for s in range(4)]
    for name in curves:
        assert [float(r[name]) for r in rows] == pytest.approx(want) == module.lrs


@pytest.mark.parametrize("scheduler", ["cosine", "linear"])
def test_a_decaying_schedule_without_a_step_count_is_refused_naming_the_field(scheduler):
    """max_epochs=-1 with no max_steps (a run only max_time ends): the decay has no length. The
    refusal names task.optim.scheduler and points to the cool-down, which follows the time box."""
    net = torch.nn.Linear(2, 2)
    trainer = SimpleNamespace(estimated_stepping_batches=math.inf, callbacks=[_Clock(100)])
    module = SimpleNamespace(parameters=net.parameters, trainer=trainer)
    with pytest.raises(ConfigError, match=rf"task\.optim\.scheduler={scheduler} .*max_steps.*cooldown"):
        optim.configure(module, optim.OptimConfig(scheduler=scheduler))
    # a step count makes the same config valid, and the time-boxed noam run needs none
    module.trainer.estimated_stepping_batches = 40
    assert "lr_scheduler" in optim.configure(module, optim.OptimConfig(scheduler=scheduler))
    module.trainer.estimated_stepping_batches = math.inf
    assert "lr_scheduler" in optim.configure(module, optim.OptimConfig(scheduler="noam", cooldown=0.2))
