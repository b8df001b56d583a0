"""``trainer.compile=true``: the task's model through ``torch.compile`` (attnflow.training.callbacks.CompiledModel).

What is checked:
- a few steps of the default experiment (tiny, no dropout) compiled give the losses of the same
  steps uncompiled, and the compiled run's forward passes ran under ``torch.compile`` (a forward
  hook sees ``torch.compiler.is_compiling()``); the ``state_dict`` keys are those of an
  uncompiled run (no ``_orig_mod.``), so checkpoints load either way;
- the model is compiled once per model object across stages, again in a pickled copy (the
  workers of ddp_spawn, whose copy drops the compilation);
- a value that is not a bool is refused before any work.
"""

from __future__ import annotations

import pickle
from types import SimpleNamespace

import pytest
import pytorch_lightning as pl
import torch

from attnflow.config.registry import ConfigError
from attnflow.training.callbacks import CompiledModel
from attnflow.training.run import train
from support import compose_cfg

# Three full batches of four-token reversals (one shape: no recompilation), nothing validated,
# tested or recorded; a small RNNsearch without dropout (compiled code draws other masks).
TINY = ["data.train_size=96", "data.val_size=16", "data.test_size=16", "data.batch_size=32",
        "data.min_len=4", "data.max_len=4", "model.embed_dim=16", "model.encoder.hidden_dim=16",
        "model.decoder.embed_dim=16", "model.decoder.hidden_dim=16", "scorer.hidden_dim=16",
        "trainer.accelerator=cpu", "trainer.max_steps=3", "trainer.limit_val_batches=0",
        "trainer.num_sanity_val_steps=0", "trainer.enable_model_summary=false", "test=false",
        "callbacks.checkpoint=null", "callbacks.progress_bar=none", "callbacks.attention_maps=null",
        "logger=none"]


class Steps(pl.Callback):
    """Each training step's loss, whether the model's forward passes were being compiled, and
    the task's ``state_dict`` keys after training."""

    def __init__(self):
        self.losses, self.compiling, self.keys = [], set(), []

    def on_train_start(self, trainer, pl_module):
        self.hook = pl_module.model.register_forward_hook(
            lambda module, args, out: self.compiling.add(torch.compiler.is_compiling()))

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.losses.append(float(outputs["loss"]))

    def on_train_end(self, trainer, pl_module):
        self.hook.remove()
        self.keys = list(pl_module.state_dict())


def _steps(tmp_path, compiled: bool) -> Steps:
    steps = Steps()
    flag = str(compiled).lower()
    train(compose_cfg([*TINY, f"trainer.compile={flag}"]), tmp_path / f"compile-{flag}", [steps])
    return steps


@pytest.mark.slow
def test_compiled_steps_match_the_uncompiled_ones(tmp_path):
    eager, compiled = _steps(tmp_path, False), _steps(tmp_path, True)
    assert len(eager.losses) == len(compiled.losses) == 3
    assert compiled.losses == pytest.approx(eager.losses, rel=1e-4)
    assert eager.compiling == {False} and compiled.compiling == {True}
    assert compiled.keys == eager.keys and not [k for k in compiled.keys if "_orig_mod" in k]


class _Model(torch.nn.Linear):
    """A Linear that counts the calls of its ``compile``."""

    def __init__(self):
        super().__init__(2, 2)
        self.compiled = 0

    def compile(self, *args, **kwargs):
        self.compiled += 1


def test_compiled_once_per_model_and_again_in_a_pickled_copy():
    callback, task = CompiledModel(), SimpleNamespace(model=_Model())
    for stage in ("fit", "validate", "test"):
        callback.setup(None, task, stage)
    assert task.model.compiled == 1
    copy = pickle.loads(pickle.dumps(callback))  # (ddp_spawn's workers get a pickled copy)
    worker_task = SimpleNamespace(model=pickle.loads(pickle.dumps(task.model)))
    copy.setup(None, worker_task, "fit")
    assert worker_task.model.compiled == 2  # (the count travelled with the copy)
    callback.setup(None, SimpleNamespace(model=_Model()), "fit")  # another model: compiled
    callback.setup(None, task, "test")
    assert task.model.compiled == 2


@pytest.mark.parametrize("value, shown", [("maybe", "'maybe'"), ("null", "None")])
def test_a_value_that_is_not_a_bool_is_refused_before_any_work(tmp_path, value, shown):
    with pytest.raises(ConfigError, match=rf"^trainer\.compile \(at 'trainer\.compile'\) must be "
                                          rf"bool, got {shown}$"):
        train(compose_cfg([*TINY, f"trainer.compile={value}"]), tmp_path / "run")
    assert not (tmp_path / "run").exists()
