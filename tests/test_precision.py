"""bf16 mixed precision, gradient accumulation and gradient clipping, all at once, for every task
family on the CPU (and, where a CUDA GPU is, the reversal and graph cases on it), through the runner (``attnflow.training.run.train``) with the config overrides a user
types: ``trainer.precision=bf16-mixed trainer.accumulate_grad_batches=2
trainer.gradient_clip_val=C``.

What is checked, by a callback that watches the real optimiser:
- bf16: the model's layers compute in bfloat16 during training (autocast took effect);
- accumulation: the optimiser steps once per 2 training batches (after batches 1, 3, 5, …);
- clipping: the gradient norm the optimiser steps with is ≤ C, and it was > C before clipping
  (so clipping did something) — with the fused optimiser, which Lightning will not clip for under
  mixed precision, so the task does (``Task.configure_gradient_clipping``);
- learning: the validation loss (the whole validation set, before training in the sanity check,
  and after the epoch) is finite and lower after the epoch.

On a GPU also float16 mixed precision (``16-mixed``), whose GradScaler must unscale the gradients
before they are clipped: the optimiser is the unfused one there when clipping, the fused one
(which unscales inside its step) when not.
"""

from __future__ import annotations

import gzip
import json
import math
import random

import pytest
import pytorch_lightning as pl
import torch

import attnflow.training.run as run
from support import DATA_DIR, compose_cfg

CLIP = 0.05
ON = {"cpu": ["trainer.accelerator=cpu"], "cuda": ["trainer.accelerator=gpu", "trainer.devices=1"]}
GPU = pytest.mark.skipif(not torch.cuda.is_available(),
                         reason="no CUDA device (bench/gpu_check.sh runs these on a GPU machine)")
DEVICES = ["cpu", pytest.param("cuda", marks=GPU)]
BASE = ["trainer.max_epochs=1", "trainer.num_sanity_val_steps=-1", "callbacks.progress_bar=none",
        "logger=none", "callbacks.attention_maps=null", "test=false"]
COMMON = ["trainer.precision=bf16-mixed", "trainer.accumulate_grad_batches=2",
          f"trainer.gradient_clip_val={CLIP}", *ON["cpu"], *BASE]


def _grad_norm(module: torch.nn.Module) -> float:
    grads = [p.grad.detach().float().norm() for p in module.parameters() if p.grad is not None]
    return float(torch.stack(grads).norm()) if grads else 0.0


class Watch(pl.Callback):
    """Records what the optimiser does (see the module docstring)."""

    def __init__(self):
        self.batch = -1
        self.steps_after: list = []   # training batch index after which the optimiser stepped
        self.pre_clip: list = []      # gradient norm before clipping, per step
        self.post_clip: list = []     # gradient norm the optimiser stepped with
        self.val_loss: list = []      # sanity check (before training), then each epoch
        self.dtypes: set = set()
        self._hooks: list = []

    def on_train_start(self, trainer, pl_module):
        def stepped(optimizer, args, kwargs):  # after optimizer.step: its grads are the clipped ones
            self.steps_after.append(self.batch)
            self.post_clip.append(_grad_norm(pl_module))

        self.fused = trainer.optimizers[0].defaults.get("fused")
        self.device = next(pl_module.parameters()).device.type
        self._hooks.append(trainer.optimizers[0].register_step_post_hook(stepped))
        for m in pl_module.modules():
            if isinstance(m, torch.nn.Linear):
                self._hooks.append(m.register_forward_hook(
                    lambda mod, inp, out: self.dtypes.add(out.dtype) if torch.is_tensor(out) else None))

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.batch = batch_idx

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        self.pre_clip.append(_grad_norm(pl_module))

    def on_validation_epoch_end(self, trainer, pl_module):
        # (after the fit, the best checkpoint's validation is logged as best/val/loss)
        self.val_loss.append(float(trainer.callback_metrics[pl_module.logged_as + "val/loss"]))

    def on_train_end(self, trainer, pl_module):
        for h in self._hooks:
            h.remove()


def _train(overrides, tmp_path, monkeypatch):
    watch = Watch()
    build = run.build_callbacks
    monkeypatch.setattr(run, "build_callbacks", lambda *a, **k: [*build(*a, **k), watch])
    return run.train(compose_cfg(overrides), tmp_path / "run"), watch


def _run(overrides, tmp_path, monkeypatch, batches_per_epoch, device="cpu"):
    summary, watch = _train([*COMMON, *ON[device], *overrides], tmp_path, monkeypatch)

    assert watch.device == device
    assert torch.bfloat16 in watch.dtypes, watch.dtypes
    assert watch.fused is True  # the fused optimiser, clipped by the task under bf16-mixed
    odd = [i for i in range(batches_per_epoch) if i % 2 == 1 or i == batches_per_epoch - 1]
    assert watch.steps_after == odd, watch.steps_after  # an epoch's last batch always steps
    assert summary["global_step"] == len(odd)
    assert all(n <= CLIP * (1 + 1e-3) for n in watch.post_clip), watch.post_clip
    assert max(watch.pre_clip) > CLIP, watch.pre_clip
    # sanity check (before training), the epoch's validation, the final one of the best checkpoint
    assert all(math.isfinite(v) for v in watch.val_loss) and len(watch.val_loss) == 3, watch.val_loss
    assert watch.val_loss[1] < watch.val_loss[0], watch.val_loss
    assert all(math.isfinite(v) for v in summary["metrics"].values()), summary["metrics"]
    return watch


REVERSE = ["data.train_size=160", "data.val_size=64", "data.batch_size=32"]  # 5 batches per epoch


@pytest.mark.slow
@pytest.mark.parametrize("device", DEVICES)
def test_seq2seq_rnnsearch(tmp_path, monkeypatch, device):
    _run([*REVERSE, "task.optim.lr=0.01"], tmp_path, monkeypatch, batches_per_epoch=5, device=device)


TRANSFORMER = ["experiment=reverse_transformer", *REVERSE, "task.optim.scheduler=none",
               "task.optim.lr=0.003"]


@pytest.mark.slow
@pytest.mark.parametrize("device", DEVICES)
def test_transformer_on_reverse(tmp_path, monkeypatch, device):
    _run(TRANSFORMER, tmp_path, monkeypatch, batches_per_epoch=5, device=device)


@GPU
@pytest.mark.parametrize("clip", [CLIP, None])
def test_float16_mixed_on_a_gpu_clips_after_unscaling(tmp_path, monkeypatch, clip):
    """``trainer.precision=16-mixed``: float16 autocast with Lightning's GradScaler, 5 steps. With
    ``gradient_clip_val`` the scaler unscales before Lightning clips, which a fused step (it
    unscales inside) cannot allow: the unfused optimiser, and every step taken is clipped to C.
    Without it (``null``; the default trainer clips at 1.0), the fused optimiser. A step the scaler
    skips (an overflow) is not taken."""
    summary, watch = _train([*TRANSFORMER, *BASE, *ON["cuda"], "trainer.precision=16-mixed",
                             f"trainer.gradient_clip_val={clip or 'null'}"], tmp_path, monkeypatch)
    assert watch.device == "cuda" and torch.float16 in watch.dtypes, (watch.device, watch.dtypes)
    assert watch.fused is (clip is None)
    assert watch.steps_after and set(watch.steps_after) <= set(range(5)), watch.steps_after
    if clip:
        assert all(n <= CLIP * (1 + 1e-3) for n in watch.post_clip), watch.post_clip
        assert max(watch.pre_clip) > CLIP, watch.pre_clip  # unscaled norms: clipping did something
    assert all(math.isfinite(v) for v in watch.val_loss) and watch.val_loss[1] < watch.val_loss[0]
    assert summary["precision"] == "16-mixed"


@pytest.mark.slow
def test_translation_on_a_multi30k_subset(tmp_path, monkeypatch):
    if not (DATA_DIR / "multi30k").is_dir():
        pytest.skip(f"Multi30k not found at {DATA_DIR / 'multi30k'} (set ATTNFLOW_DATA_DIR)")
    _run(["experiment=mt_rnnsearch", "data.max_pairs=96", "data.vocab_size=300", "data.batch_size=16",
          "model.embed_dim=32", "model.encoder.hidden_dim=32", "model.decoder.embed_dim=32",
          "model.decoder.hidden_dim=32", "task.optim.lr=0.01", "data.max_decode_len=12"],
         tmp_path, monkeypatch, batches_per_epoch=6)


def _documents(path, n, seed):
    """Tiny labelled reviews: a positive or negative word in random filler, 2-3 sentences."""
    rng = random.Random(seed)
    filler = "the film a plot actor scene story was it and".split()
    rows = []
    for i in range(n):
        label = i % 2
        cue = rng.choice(["great", "superb", "wonderful"] if label else ["awful", "dull", "bad"])
        sents = [" ".join(rng.choices(filler, k=rng.randint(3, 6))) for _ in range(rng.randint(1, 2))]
        rows.append({"text": ". ".join(sents + [f"it was {cue}"]) + ".", "label": label})
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.write("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


@pytest.mark.slow
def test_han_documents(tmp_path, monkeypatch):
    train = _documents(tmp_path / "train.jsonl.gz", 96, 0)
    dev = _documents(tmp_path / "dev.jsonl.gz", 32, 1)
    _run(["experiment=han_imdb", f"data.train_path={train}", f"data.val_path={dev}",
          "data.test_path=''", "data.min_freq=1", "data.batch_size=16", "model.embed_dim=16",
          "model.word_encoder.hidden_dim=8", "model.sentence_encoder.hidden_dim=8",
          "task.optim.lr=0.01", "task.renderings=0"], tmp_path, monkeypatch, batches_per_epoch=6)


@pytest.mark.parametrize("device", DEVICES)
def test_gat_on_synthetic_graph_batches(tmp_path, monkeypatch, device):
    # 200 training nodes in 2-hop batches of 50 seeds: 4 batches, so accumulation has work to do
    _run(["experiment=gat_synthetic", "data.batch_size=50", "task.picture=false"],
         tmp_path, monkeypatch, batches_per_epoch=4, device=device)


@pytest.mark.slow
@pytest.mark.parametrize("batches", ["full", "khop"])
def test_gat_trains_with_bf16_weights(tmp_path, batches):
    """``trainer.precision=bf16-true`` keeps the weights themselves in bfloat16; Lightning casts a
    batch's tensors to it, but not a PyG graph's features, which the task casts (it failed in the
    first validation step before). The full graph (a step an epoch) and 2-hop batches of 50 seeds
    (4 steps an epoch); the attention picture of the end is drawn from the bf16 model too."""
    extra = (["data.batch_size=50", "trainer.max_epochs=2"] if batches == "khop"
             else ["data.loader=full", "trainer.max_epochs=10"])
    cfg = compose_cfg(["experiment=gat_synthetic", "trainer.precision=bf16-true",
                       "trainer.accelerator=cpu", "callbacks.progress_bar=none", "logger=none", *extra])
    summary = run.train(cfg, tmp_path / "run")
    ckpt = torch.load(summary["best_checkpoint"], map_location="cpu", weights_only=True)
    floats = [v.dtype for v in ckpt["state_dict"].values() if v.is_floating_point()]
    assert floats and set(floats) == {torch.bfloat16}
    assert all(math.isfinite(v) for v in summary["metrics"].values()), summary["metrics"]
    assert summary["metrics"]["best/val/acc"] > 0.5  # 4 balanced classes: chance is 0.25
    assert (tmp_path / "run" / "attention" / "graph_embedding.png").is_file()


@pytest.mark.slow
def test_float32_matmul_precision_holds_while_training_and_is_put_back(tmp_path, monkeypatch):
    """``float32_matmul_precision=medium``: PyTorch's setting is 'medium' in training and in the
    validation after it (what Lightning's callbacks see), and the one found before once the run
    is over; the callback that sets it in ddp_spawn's fresh processes does the same."""
    seen = []

    class See(pl.Callback):
        def on_train_start(self, trainer, pl_module):
            seen.append(("train", torch.get_float32_matmul_precision()))

        def on_validation_start(self, trainer, pl_module):
            seen.append(("val", torch.get_float32_matmul_precision()))

    build = run.build_callbacks
    monkeypatch.setattr(run, "build_callbacks", lambda *a, **k: [*build(*a, **k), See()])
    before = torch.get_float32_matmul_precision()
    assert before != "medium"
    run.train(compose_cfg([*COMMON, "data.train_size=32", "data.val_size=32", "data.batch_size=32",
                           "trainer.num_sanity_val_steps=0", "float32_matmul_precision=medium"]),
              tmp_path / "run")  # one training and one validation batch
    assert ("train", "medium") in seen and all(p == "medium" for _, p in seen), seen
    assert torch.get_float32_matmul_precision() == before

    from attnflow.training.callbacks import Float32MatmulPrecision
    cb = Float32MatmulPrecision("high")  # in a spawned process: PyTorch's default until setup
    cb.setup(None, None, "fit")
    assert torch.get_float32_matmul_precision() == "high"
    cb.teardown(None, None, "fit")
    assert torch.get_float32_matmul_precision() == before
