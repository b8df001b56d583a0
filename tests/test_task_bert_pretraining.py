"""BERT pretraining task: MLM + NSP loss against a hand computation, accuracies over the selected
positions only, −100 positions never counting; the experiment end to end on a small corpus."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from attnflow.config.registry import TASKS
from attnflow.tasks.bert_pretraining import BertPretrainingTask

CLS, SEP, MASK, PAD = 1, 2, 3, 0
V = 12


class StandIn(nn.Module):
    """The model contract's methods, position-wise (no mixing across tokens): the hidden state
    at t depends on token t and its segment only."""

    def __init__(self, d: int = 6):
        super().__init__()
        self.tok, self.seg = nn.Embedding(V, d), nn.Embedding(2, d)
        self.out, self.nsp = nn.Linear(d, V), nn.Linear(d, 2)

    def forward(self, input_ids, segment_ids, attention_mask):
        return self.tok(input_ids) + self.seg(segment_ids)

    def mlm_logits(self, hidden):
        return self.out(hidden)

    def nsp_logits(self, hidden):
        return self.nsp(hidden[:, 0])


def _task(model=None, **kw):
    torch.manual_seed(0)
    return BertPretrainingTask(model or StandIn(), MASK, [str(i) for i in range(V)], **kw)


def _logged(task, batch, split="train"):
    """step()'s loss and what it logs: {name: (value, batch_size)}."""
    logs = {}
    task.log = lambda name, value, batch_size=None, **kw: logs.__setitem__(
        name, (float(value.detach()), batch_size))
    return task.step(batch, split), logs


def _batch():
    # ⟨CLS⟩ S ⟨SEP⟩ S′ ⟨SEP⟩ pad; selected: (0,3) masked, (0,4) kept, (0,6) masked,
    # (1,2) replaced by a random token, (1,5) masked
    ids = torch.tensor([[CLS, 5, 6, MASK, 8, SEP, MASK, 10, SEP, PAD],
                        [CLS, 4, 11, 7, SEP, MASK, 9, SEP, PAD, PAD],
                        [CLS, 5, 5, SEP, 6, 6, SEP, PAD, PAD, PAD]])
    labels = torch.full_like(ids, -100)
    labels[0, 3], labels[0, 4], labels[0, 6] = 7, 8, 9
    labels[1, 2], labels[1, 5] = 6, 10
    labels[2, 5] = 6  # kept
    seg = torch.zeros_like(ids)
    seg[0, 6:9], seg[1, 5:8], seg[2, 4:7] = 1, 1, 1
    return {"input_ids": ids, "segment_ids": seg, "attention_mask": ids != PAD,
            "mlm_labels": labels, "nsp_labels": torch.tensor([0, 1, 0])}


def _hand_ce(logits, targets):
    """mean of −ln softmax(logits)[target], written out."""
    logits = logits.double()
    return float(sum(torch.logsumexp(l, 0) - l[y] for l, y in zip(logits, targets)) / len(targets))


def test_loss_is_mlm_plus_nsp_cross_entropy():
    task, batch = _task(), _batch()
    loss, logs = _logged(task, batch)
    with torch.no_grad():
        hidden = task.model(batch["input_ids"], batch["segment_ids"], batch["attention_mask"])
        full = task.model.out(hidden)  # (B, T, V): every position, picked by hand below
        where = [(0, 3), (0, 4), (0, 6), (1, 2), (1, 5), (2, 5)]
        mlm = _hand_ce(torch.stack([full[b, t] for b, t in where]),
                       [int(batch["mlm_labels"][b, t]) for b, t in where])
        nsp = _hand_ce(task.model.nsp(hidden[:, 0]), batch["nsp_labels"].tolist())
    assert math.isclose(float(loss.detach()), mlm + nsp, rel_tol=1e-5)
    assert math.isclose(logs["train/mlm_loss"][0], mlm, rel_tol=1e-5)
    assert math.isclose(logs["train/nsp_loss"][0], nsp, rel_tol=1e-5)
    assert logs["train/mlm_loss"][1] == 6 and logs["train/nsp_loss"][1] == 3
    assert loss.requires_grad
    # nsp_weight=0: MLM alone
    loss0, _ = _logged(_task(nsp_weight=0.0), batch)
    assert math.isclose(float(loss0.detach()), mlm, rel_tol=1e-5)


class Copy(StandIn):
    """Predicts at every position the token it sees there; NSP always says 'is next' (0)."""

    def __init__(self):
        super().__init__(d=V)
        with torch.no_grad():
            self.tok.weight.copy_(torch.eye(V))
            self.seg.weight.zero_()
            self.out.weight.copy_(torch.eye(V))
            self.out.bias.zero_()
            self.nsp.weight.zero_()
            self.nsp.bias.copy_(torch.tensor([1.0, 0.0]))


def test_accuracies_count_selected_positions_only():
    # copying is right at the 2 kept positions of 6 selected ((0,4), (2,5)) and at every one of
    # the 21 unselected real tokens: counting those would give far more than 2/6
    task, batch = _task(Copy()), _batch()
    _, logs = _logged(task, batch, "val")
    assert logs["val/mlm_acc"] == (pytest.approx(2 / 6), 6)
    assert logs["val/nsp_acc"] == (pytest.approx(2 / 3), 3)


def test_unselected_positions_never_count():
    task, batch = _task(), _batch()
    _, before = _logged(task, batch)
    other = {k: v.clone() for k, v in batch.items()}
    unselected = (batch["mlm_labels"] == -100) & (batch["input_ids"] != CLS)
    other["input_ids"][unselected] = 4  # every unselected token (and the padding) changed
    _, after = _logged(task, other)
    for name in ("train/mlm_loss", "train/mlm_acc"):
        assert after[name][0] == pytest.approx(before[name][0], rel=1e-6)
    # ...whereas a selected position's input does count (the check above can fail)
    other["input_ids"][0, 4] = 4
    _, changed = _logged(task, other)
    assert changed["train/mlm_loss"][0] != pytest.approx(before["train/mlm_loss"][0], rel=1e-6)


def test_epoch_values_are_means_over_positions_not_batches():
    """Under Lightning: val/mlm_acc over two batches is (correct)/(selected) of both together."""
    import pytorch_lightning as pl

    task = _task(Copy())
    a = _batch()  # 2 right of 6 selected
    b = {k: v[2:].clone() for k, v in _batch().items()}  # 1 right of 1 selected
    trainer = pl.Trainer(accelerator="cpu", logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False)
    loader = torch.utils.data.DataLoader([a, b], batch_size=None)  # the dicts are the batches
    trainer.validate(task, loader, verbose=False)
    assert float(trainer.callback_metrics["val/mlm_acc"]) == pytest.approx(3 / 7)
    assert float(trainer.callback_metrics["val/nsp_acc"]) == pytest.approx(3 / 4)


def test_registry_fields_and_defaults():
    cfg = TASKS.validate({"name": "bert_pretraining"})
    assert cfg["optim"]["optimizer"] == "adamw" and cfg["optim"]["lr"] == 1e-4
    assert cfg["optim"]["scheduler"] == "linear"  # Devlin et al.: warm-up, then linear decay
    assert cfg["optim"]["decay_bias_and_norm"] is False
    task = TASKS.build({"name": "bert_pretraining", "optim": {"lr": 3e-4}}, StandIn(),
                       mask_id=MASK, itos=["x"] * V)
    assert task.optim.lr == 3e-4 and task.mask_id == MASK
    assert BertPretrainingTask.interface == "pretraining"
    assert set(BertPretrainingTask.metrics) == {"loss", "mlm_loss", "nsp_loss", "mlm_acc", "nsp_acc"}


# -- the experiment ------------------------------------------------------------------------------
WORDS = ("river stone garden window candle silver forest winter market violin harbor meadow "
         "lantern pepper castle mirror orchard thunder copper falcon").split()


def _corpus(path, n_docs, seed):
    """One document per line, about one of 5 topics: every sentence is the topic's 4 words, in
    order. A masked word follows from its neighbours (and is one of its topic's 4: ln 4 ≪ ln V,
    even for a model that has not yet learned positions); a random next span comes from another
    topic."""
    import random

    rng = random.Random(seed)
    lines = []
    for _ in range(n_docs):
        topic = WORDS[4 * rng.randrange(5):][:4]
        lines.append(" ".join(" ".join(topic) + "." for _ in range(rng.randint(4, 8))))
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.slow
def test_pretraining_run_lowers_mlm_loss_well_below_ln_vocab(tmp_path):
    import json

    from attnflow.training.run import train
    from support import compose_cfg

    train_file = _corpus(tmp_path / "train.txt", 300, 0)
    val_file = _corpus(tmp_path / "val.txt", 40, 1)
    run_dir = tmp_path / "run"
    n = torch.get_num_threads()
    torch.set_num_threads(1)  # a shared 2-core machine: one intra-op thread is faster
    try:
        summary = train(compose_cfg([
            "experiment=bert_pretrain_imdb", f"data.train_path={train_file}",
            f"data.val_path={val_file}", "data.vocab_size=120", "data.max_len=32",
            "data.batch_size=16", "model.d_model=32", "model.layers=2", "model.ffn_dim=64",
            "model.dropout=0.0", "attention.heads=2", "task.optim.lr=3e-3",
            "task.optim.scheduler=none", "trainer.max_epochs=100", "trainer.max_steps=300",
            "trainer.accelerator=cpu", "trainer.check_val_every_n_epoch=null",
            "trainer.val_check_interval=300",  # one validation, at the end (the checkpoint)
            "callbacks.progress_bar=none", "logger=csv"]), run_dir)
    finally:
        torch.set_num_threads(n)
    vocab = json.loads((run_dir / "tokenizer" / "wordpiece.json").read_text())["model"]["vocab"]
    m = summary["metrics"]
    assert summary["global_step"] == 300
    # a uniform MLM head scores ln V (≈ 4.8), unigram frequencies ln 21 (≈ 3.0, 20 words and '.');
    # seeds 1–4 and 1234 end at 1.0–1.2, accuracy 0.64–0.73, NSP accuracy 0.80–0.87
    assert m["best/val/mlm_loss"] < 0.35 * math.log(len(vocab)), (m, len(vocab))
    assert m["best/val/mlm_acc"] > 0.4, m
    assert m["best/val/nsp_acc"] > 0.6, m
    assert {f"best/val/{k}" for k in BertPretrainingTask.metrics} <= set(m)
    assert json.loads((run_dir / "metrics.json").read_text())["metrics"] == m
    ckpt = torch.load(summary["best_checkpoint"], map_location="cpu", weights_only=True)
    assert ckpt["attnflow_config"]["task"]["name"] == "bert_pretraining"
    assert ckpt["attnflow_artifacts"]["tokenizer"]  # the WordPiece tokenizer travels with the weights


@pytest.mark.parametrize("override, names", [("task=classification", "task 'classification'"),
                                             ("model=transformer", "model 'transformer'")])
def test_pretraining_does_not_compose_with_other_families(override, names):
    from attnflow.config.registry import ConfigError
    from attnflow.training.validate import resolve_config
    from support import compose_cfg

    with pytest.raises(ConfigError, match=f"do not fit together.*{names}"):
        resolve_config(compose_cfg(["experiment=bert_pretrain_imdb", override]))


def test_imdb_composition_validates():
    from support import DATA_DIR, compose_cfg

    if not (DATA_DIR / "imdb" / "train.jsonl.gz").is_file():
        pytest.skip(f"IMDB not found under {DATA_DIR / 'imdb'} (set ATTNFLOW_DATA_DIR)")
    from attnflow.training.validate import resolve_config

    cfg = resolve_config(compose_cfg(["experiment=bert_pretrain_imdb"]))
    assert (cfg["data"]["name"], cfg["model"]["name"], cfg["task"]["name"]) == (
        "bert_pretraining", "bert", "bert_pretraining")
    assert cfg["data"]["train_path"].endswith("imdb/train.jsonl.gz")
    assert cfg["data"]["val_path"].endswith("imdb/dev.jsonl.gz")
    assert cfg["model"]["positional"]["name"] == "learned"
    assert cfg["model"]["attention"]["heads"] == 4 and cfg["test"] is False
    # the variants the issue names compose and validate too
    cfg = resolve_config(compose_cfg(["experiment=bert_pretrain_imdb", "positional=relative",
                                      "model.norm=pre", "scorer=dot"]))
    assert cfg["model"]["positional"]["name"] == "relative" and cfg["model"]["norm"] == "pre"
