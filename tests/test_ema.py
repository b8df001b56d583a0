"""``callbacks.ema`` (attnflow/training/ema.py): the exponential moving average of the weights.

Checked against the test's own record of θ after every optimiser step (a callback of the test),
with θ̄ computed here by the formula: θ̄ is the initial weights until the first update, θ at it,
then θ̄ ← βθ̄ + (1 − β)θ after each step s ≥ ``start_step`` with s % ``every_n_steps`` == 0.
Validation during the fit scores θ̄ and training goes on with θ; every checkpoint's ``state_dict``
is θ̄ (``current_model_state``: θ), the kept epochs of ``callbacks.average`` are θ̄, the final
validation of the best checkpoint equals that epoch's (a resumed run ends as an uninterrupted one:
test_averaging.py); bad entries are refused before any work."""

from __future__ import annotations

from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch

import attnflow.training.run as run_module
from attnflow.config.registry import ConfigError
from attnflow.training.run import train
from averaging_runs import TINY, load
from support import compose_cfg

BETA, START, EVERY = 0.8, 1, 2
EMA = f"callbacks.ema={{decay: {BETA}, start_step: {START}, every_n_steps: {EVERY}}}"
CONSTANT = "task.optim.scheduler=none"  # the default cosine decays over max_epochs, which a resume extends


class Steps(pl.Callback):
    """θ after every optimiser step, the weights each validation of the fit sees, and the weights
    at the start of each training batch (the test's record)."""

    def __init__(self):
        self.after_step, self.validated, self.trained_from = [], {}, []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.trained_from.append(_weights(pl_module))

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.after_step.append(_weights(pl_module))

    def on_validation_epoch_start(self, trainer, pl_module):
        if trainer.state.fn == "fit" and not trainer.sanity_checking:
            self.validated[trainer.current_epoch] = _weights(pl_module)


def _weights(module):
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def _ema_by_hand(initial, thetas, start=START, every=EVERY):
    """θ̄ after each step s, from the initial weights and θ after each step."""
    out, bar, first = [], {k: v.double() for k, v in initial.items()}, True
    for s, theta in enumerate(thetas):
        if s >= start and s % every == 0:
            bar = {k: (0 if first else BETA) * bar[k] + (1 if first else 1 - BETA) * theta[k].double()
                   for k in bar}
            first = False
        out.append(bar)
    return out


def _close(a, b):
    return a.keys() == b.keys() and all(torch.allclose(a[k].double(), b[k].double(), atol=1e-6) for k in a)


def _train(overrides, run_dir, monkeypatch):
    steps = Steps()
    build = run_module.build_callbacks
    monkeypatch.setattr(run_module, "build_callbacks", lambda *a, **k: [*build(*a, **k), steps])
    return train(compose_cfg([*TINY, *overrides]), run_dir), steps


@pytest.mark.slow
def test_validation_and_checkpoints_hold_the_average_and_training_goes_on_with_the_weights(tmp_path, monkeypatch):
    summary, steps = _train([EMA, CONSTANT, "trainer.max_epochs=3", "callbacks.average.best=2",
                             "test=false"],
                            tmp_path / "run", monkeypatch)
    per_epoch = len(steps.after_step) // 3  # 4 steps an epoch
    bars = _ema_by_hand(steps.trained_from[0], steps.after_step)
    assert not _close(bars[START], steps.after_step[START])  # (the first update is after START)
    for epoch in range(3):
        end = (epoch + 1) * per_epoch - 1  # the epoch's last step
        assert _close(steps.validated[epoch], bars[end])  # validation saw θ̄ …
        assert not _close(bars[end], steps.after_step[end])
        if epoch < 2:  # … and the next epoch trains on from θ
            assert _close(steps.trained_from[end + 1], steps.after_step[end])
    last = load(tmp_path / "run" / "checkpoints" / "last.ckpt")
    assert _close(last["state_dict"], bars[-1])
    assert _close(last["current_model_state"], steps.after_step[-1])
    # the best checkpoint is θ̄ of its epoch, and the final validation of it is that epoch's
    best = load(summary["best_single_checkpoint"])
    assert _close(best["state_dict"], bars[(best["epoch"] + 1) * per_epoch - 1])
    # callbacks.average kept θ̄ of its epochs (its own files) and averaged those
    kept = summary["averaged_from"]["epochs"]
    for epoch in kept:
        saved = load(tmp_path / "run" / "checkpoints" / "avg" / f"epoch{epoch}.pt")["state_dict"]
        assert _close(saved, bars[(epoch + 1) * per_epoch - 1])
    averaged = load(tmp_path / "run" / "checkpoints" / "averaged.ckpt")["state_dict"]
    mean = {k: sum(bars[(e + 1) * per_epoch - 1][k] for e in kept) / len(kept) for k in averaged}
    assert _close(averaged, mean)
    single = summary["metrics_best_single"]["best_single/val/loss"]
    logged = [r for r in _csv(tmp_path / "run") if r.get("val/loss") and int(r["epoch"]) == best["epoch"]]
    assert logged and abs(float(logged[0]["val/loss"]) - single) < 1e-5


def _csv(run_dir):
    import csv

    rows = []
    for path in sorted(run_dir.glob("csv/**/metrics.csv")):
        with open(path) as f:
            rows += list(csv.DictReader(f))
    return rows


@pytest.mark.slow
def test_before_the_first_update_the_average_is_the_initial_weights(tmp_path, monkeypatch):
    """start_step past the first epoch: its validation and checkpoint are the initial weights (as
    Lightning's EMAWeightAveraging defines it), and a run that ends there says so."""
    with pytest.warns(UserWarning, match=r"callbacks.ema made no average: training ended at step "
                                         r"\d+, before callbacks.ema.start_step=100"):
        summary, steps = _train(["callbacks.ema={decay: 0.5, start_step: 100}", CONSTANT,
                                 "trainer.max_epochs=1", "test=false", "logger=none"],
                                tmp_path / "run", monkeypatch)
    assert _close(steps.validated[0], steps.trained_from[0])
    last = load(tmp_path / "run" / "checkpoints" / "last.ckpt")
    assert _close(last["state_dict"], steps.trained_from[0])
    assert _close(last["current_model_state"], steps.after_step[-1])


@pytest.mark.parametrize("overrides, expected", [
    (["callbacks.ema={decay: 1.0}"], ["callbacks.ema.decay", "must be in (0, 1)", "got 1.0"]),
    (["callbacks.ema={decay: 0.99, start: 5}"], ["callbacks.ema", "no field 'start'", "start_step"]),
    (["callbacks.ema={every_n_steps: 0}"], ["callbacks.ema", "every_n_steps"]),
    (["callbacks.ema=0.999"], ["callbacks.ema (at 'callbacks.ema') must be a mapping, got 0.999"]),
])
def test_bad_entries_are_refused_before_any_work(overrides, expected, tmp_path):
    with pytest.raises(ConfigError) as err:
        train(compose_cfg([*TINY, *overrides]), tmp_path / "run")
    for text in expected:
        assert text in str(err.value), str(err.value)
    assert not (tmp_path / "run").exists()


class _Line(pl.LightningModule):
    """y = wx + b by SGD on a fixed batch (no attnflow: the callback alone)."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self.lin(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def validation_step(self, batch, batch_idx):
        self.seen = _weights(self)

    def train_dataloader(self):
        g = torch.Generator().manual_seed(0)
        x = torch.randn(24, 3, generator=g)
        return torch.utils.data.DataLoader(list(zip(x, x.sum(1, keepdim=True))), batch_size=4)

    val_dataloader = train_dataloader


def test_a_checkpoint_saved_after_the_fit_keeps_the_trained_weights_to_resume(tmp_path):
    """After the fit the module holds θ̄ (what the runner evaluates without a checkpoint); a
    checkpoint written then (last.ckpt of a fit stopped between validations) must still keep θ as
    the state a resume continues from, and θ̄ as its weights."""
    from attnflow.training.ema import ExponentialMovingAverage

    steps, module = Steps(), _Line()
    trainer = pl.Trainer(max_epochs=2, callbacks=[ExponentialMovingAverage(decay=BETA, start_step=START,
                                                                           every_n_steps=EVERY), steps],
                         logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, accelerator="cpu")
    trainer.fit(module)
    bars = _ema_by_hand(steps.trained_from[0], steps.after_step)
    assert _close(_weights(module), bars[-1])
    trainer.save_checkpoint(tmp_path / "after.ckpt")
    ckpt = load(tmp_path / "after.ckpt")
    assert _close(ckpt["state_dict"], bars[-1])
    assert _close(ckpt["current_model_state"], steps.after_step[-1])
    # validating another checkpoint after the fit scores its weights, not the fit's last θ̄
    ckpt["state_dict"] = {k: v + 1 for k, v in ckpt["state_dict"].items()}
    torch.save(ckpt, tmp_path / "other.ckpt")
    trainer.validate(module, ckpt_path=tmp_path / "other.ckpt", verbose=False, weights_only=False)
    assert _close(module.seen, ckpt["state_dict"])


def test_an_empty_entry_is_the_defaults():
    """``callbacks.ema={}`` takes effect (β 0.999 from step 0), rather than reading as no EMA."""
    from attnflow.training.run import build_callbacks
    from attnflow.training.validate import resolve_config
    from attnflow.training.ema import ExponentialMovingAverage

    cfg = resolve_config(compose_cfg([*TINY, "callbacks.ema={}"]))
    emas = [cb for cb in build_callbacks(cfg["callbacks"], Path("unused")) if isinstance(cb, ExponentialMovingAverage)]
    assert len(emas) == 1 and (emas[0].decay, emas[0].start_step, emas[0].every_n_steps) == (0.999, 0, 1)
