"""A tiny training run with its weights recorded after every validation, for the tests of
checkpoint averaging (test_averaging.py, test_average_cli.py; imported as `averaging_runs`): the
weights are recorded by a callback of the tests, not by the averaging code, and their mean is
computed here."""

from __future__ import annotations

import torch
from pytorch_lightning import Callback

import attnflow.training.run as run_module
from attnflow.training.run import train
from support import FAST, compose_cfg

# the default reverse experiment, tiny: 4 steps an epoch, dropout on (resume must restore its
# random stream), val/loss as the checkpoint metric (val/seq_acc is 0 at this size)
TINY = [*FAST, "callbacks.attention_maps.examples=0", "trainer.enable_model_summary=false",
        "trainer.deterministic=true", "model.dropout=0.2", "callbacks.checkpoint.monitor=val/loss",
        "data.train_size=128"]


class Recorder(Callback):
    """The LightningModule's weights and val/loss after each validation of the fit (the test's
    own record, independent of the averaging callback)."""

    def __init__(self):
        self.states, self.scores = {}, {}

    def on_validation_end(self, trainer, pl_module):
        if trainer.sanity_checking or trainer.state.fn != "fit":
            return
        self.states[trainer.current_epoch] = {k: v.detach().clone() for k, v in pl_module.state_dict().items()}
        self.scores[trainer.current_epoch] = float(trainer.callback_metrics["val/loss"])


def train_recorded(overrides, run_dir, monkeypatch):
    recorder = Recorder()
    build = run_module.build_callbacks
    monkeypatch.setattr(run_module, "build_callbacks", lambda *a, **k: [*build(*a, **k), recorder])
    summary = train(compose_cfg([*TINY, *overrides]), run_dir)
    return summary, recorder


def mean_state(states):
    """The mean of state dicts, computed here: floats in float64, cast back."""
    out = {}
    for k, v in states[0].items():
        if v.is_floating_point():
            out[k] = (sum(s[k].double() for s in states) / len(states)).to(v.dtype)
        else:
            out[k] = states[-1][k]
    return out


def load(path):
    return torch.load(path, map_location="cpu", weights_only=True)
