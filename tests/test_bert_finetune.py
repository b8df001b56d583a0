"""BERT fine-tuning: the text_classification data module (⟨CLS⟩ text ⟨SEP⟩ batches, labels, the
pretraining run's tokenizer), the text_classification task (cross-entropy by hand, metrics), and
experiment=bert_imdb end to end on a generated corpus after a tiny pretraining run."""

from __future__ import annotations

import json
import logging
import math
import random

import pytest
import torch
from torch import nn

from attnflow.data.errors import DataError
from attnflow.data.corpus import CLS, PAD, SEP, train_wordpiece
from attnflow.data.text_classification import TextClassificationDataModule, collate_texts
from attnflow.config.registry import ConfigError, DATA, TASKS
from attnflow.tasks.text_classification import TextClassificationTask

POSITIVE = "good great wonderful brilliant moving superb".split()
NEGATIVE = "bad awful boring dull stupid poor".split()
FILLER = "the film was a and it story acting plot cast music scene".split()


def reviews(n: int, seed: int, rating: bool = False):
    """``n`` texts of filler words and 2–4 polar words; the label says which polarity (a rating
    1–4 or 7–10 with ``rating``): learnable from the words alone, by no fixed position."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        pos = rng.random() < 0.5
        words = [rng.choice(FILLER) for _ in range(rng.randint(6, 14))]
        for _ in range(rng.randint(2, 4)):
            words.insert(rng.randrange(len(words) + 1), rng.choice(POSITIVE if pos else NEGATIVE))
        label = rng.choice([7, 8, 9, 10] if pos else [1, 2, 3, 4]) if rating else int(pos)
        rows.append({"text": " ".join(words) + ".", "label": int(pos), "rating": label})
    return rows


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture()
def files(tmp_path):
    return (write_jsonl(tmp_path / "train.jsonl", reviews(80, 0, rating=True)),
            write_jsonl(tmp_path / "dev.jsonl", reviews(20, 1, rating=True)))


def module(files, **kw):
    train, dev = files
    return TextClassificationDataModule(train_path=str(train), val_path=str(dev),
                                        **{"vocab_size": 60, "batch_size": 8, **kw})


# -- the data module -------------------------------------------------------------------------------
def test_batches_are_cls_text_sep_with_padding_and_sorted_labels(files, tmp_path):
    dm = module(files, label_field="rating", max_len=512)
    dm.set_run_dir(tmp_path / "run")
    dm.setup()
    rows = [json.loads(line) for line in files[0].read_text().splitlines()]
    # classes: the rating values in sorted order, from the training file
    assert dm.task_context() == {"num_classes": 8, "class_names": ["1", "2", "3", "4", "7", "8", "9", "10"]}
    ctx = dm.model_context()
    assert ctx == {"vocab_size": dm.tokenizer.get_vocab_size(), "pad_id": PAD, "num_classes": 8}
    loader = dm._loader("train", False)  # as evaluated: one fixed seeded order of the texts
    order = list(loader.sampler)
    assert sorted(order) == list(range(len(rows)))
    batch = next(iter(loader))
    assert set(batch) == {"input_ids", "segment_ids", "attention_mask", "labels"}
    for b, row in enumerate(rows[i] for i in order[:8]):
        ids = dm.tokenizer.encode(row["text"], add_special_tokens=False).ids  # independently
        n = len(ids) + 2
        assert batch["input_ids"][b, :n].tolist() == [CLS, *ids, SEP]
        assert (batch["input_ids"][b, n:] == PAD).all()
        assert batch["attention_mask"][b].tolist() == [True] * n + [False] * (batch["input_ids"].shape[1] - n)
        assert [1, 2, 3, 4, 7, 8, 9, 10][int(batch["labels"][b])] == row["rating"]
    assert batch["attention_mask"].dtype == torch.bool and not batch["segment_ids"].any()
    assert batch["labels"].dtype == torch.long
    # the tokenizer trained here is saved with the run, and is what the checkpoint carries
    saved = (tmp_path / "run" / "tokenizer" / "wordpiece.json").read_text()
    assert json.loads(saved)["model"]["vocab"] == json.loads(dm.artifacts()["tokenizer"])["model"]["vocab"]
    assert dm.artifacts()["class_names"][-1] == "10"


def test_truncation_to_max_len_keeps_cls_and_sep(files, caplog):
    import logging

    dm = module(files, max_len=6)
    with caplog.at_level(logging.INFO, logger="attnflow.data.text_classification"):
        dm.setup()
    rows = [json.loads(line) for line in files[0].read_text().splitlines()]
    lengths = [len(dm.tokenizer.encode(r["text"], add_special_tokens=False).ids) for r in rows]
    for (ids, _), full, row in zip(dm.splits["train"], lengths, rows):
        expect = dm.tokenizer.encode(row["text"], add_special_tokens=False).ids[:4]
        assert ids.tolist() == [CLS, *expect, SEP] and len(ids) == min(6, full + 2)
    cut = sum(n > 4 for n in lengths)
    assert cut > 0 and f"train: 80 texts, {cut} cut to max_len=6" in caplog.text


def test_tsv_files_limits_and_example_batch_across_labels(tmp_path):
    train = tmp_path / "train.tsv"
    train.write_text("".join(f"{'pos' if r['label'] else 'neg'}\t{r['text']}\n" for r in reviews(60, 2)))
    dev = tmp_path / "dev.tsv"
    # sorted by label, as the IMDB dev file: the first 4 would all be 'neg'
    dev_rows = sorted(reviews(30, 3), key=lambda r: r["label"])
    dev.write_text("".join(f"{'pos' if r['label'] else 'neg'}\t{r['text']}\n" for r in dev_rows))
    dm = TextClassificationDataModule(train_path=str(train), val_path=str(dev), vocab_size=60,
                                      limit_train=25, seed=7)
    dm.setup()
    assert len(dm.splits["train"]) == 25 and len(dm.splits["val"]) == 30
    assert dm.task_context()["class_names"] == ["neg", "pos"]
    again = TextClassificationDataModule(train_path=str(train), val_path=str(dev), vocab_size=60,
                                         limit_train=25, seed=7)
    again.read()  # the same seeded subset (texts: HF's WordPiece trainer may order ties differently)
    assert again.rows["train"] == dm.rows["train"]
    texts = [line.split("\t")[1] for line in train.read_text().splitlines()]
    assert {t for t, _ in dm.rows["train"]} < set(texts)
    assert dm.example_batch(4)["labels"].tolist() == [0, 1, 0, 1]
    bad = tmp_path / "bad.tsv"
    bad.write_text("pos\tfine\nno tab here\n")
    with pytest.raises(DataError, match=r"bad.tsv line 2 has no tab"):
        TextClassificationDataModule(train_path=str(bad), val_path=str(dev)).setup()


def test_errors_name_the_file_line_and_field(files, tmp_path):
    with pytest.raises(DataError, match=r"data 'text_classification'.*train.jsonl line 1 has no label "
                                        r"field 'stars'"):
        module(files, label_field="stars").setup()
    unseen = write_jsonl(tmp_path / "unseen.jsonl", [{"text": "x", "label": 5}])
    with pytest.raises(DataError, match=r"unseen.jsonl line 1: label=5 is not a class of the labels of "
                                        r".*train.jsonl \(0, 1\)"):
        TextClassificationDataModule(train_path=str(files[0]), val_path=str(unseen), vocab_size=60).setup()
    with pytest.raises(DataError, match="file not found"):
        TextClassificationDataModule(train_path=str(tmp_path / "nope.jsonl"), val_path=str(files[1])).setup()


def _pretraining_like_run(tmp_path, texts):
    """What a bert_pretraining run leaves for its tokenizer: <run>/tokenizer/wordpiece.json and a
    checkpoint whose artifacts carry the same tokenizer as JSON text."""
    tok = train_wordpiece(texts, 50)
    run = tmp_path / "pre"
    (run / "tokenizer").mkdir(parents=True)
    tok.save(str(run / "tokenizer" / "wordpiece.json"))
    (run / "checkpoints").mkdir()
    ckpt = run / "checkpoints" / "last.ckpt"
    torch.save({"state_dict": {}, "attnflow_artifacts": {"tokenizer": tok.to_str()}}, ckpt)
    return tok, run, ckpt


def test_tokenizer_from_a_pretraining_run_directory_or_checkpoint(files, tmp_path):
    # a tokenizer of other texts than the labelled ones: its vocabulary, not one trained here
    tok, run, ckpt = _pretraining_like_run(tmp_path, ["zebra yak quokka " * 5, "lorem ipsum dolor"])
    for source in (run, ckpt):
        dm = module(files, vocab_size=None, tokenizer_from=str(source))
        dm.set_run_dir(tmp_path / f"ft_{source.name}")
        dm.setup()
        assert dm.tokenizer.get_vocab() == tok.get_vocab()
        assert dm.model_context()["vocab_size"] == tok.get_vocab_size()
        saved = tmp_path / f"ft_{source.name}" / "tokenizer" / "wordpiece.json"
        assert json.loads(saved.read_text())["model"]["vocab"] == tok.get_vocab()
    # only the checkpoint (run directory without tokenizer/): read from the checkpoint's artifacts
    (run / "tokenizer" / "wordpiece.json").unlink()
    dm = module(files, vocab_size=None, tokenizer_from=str(run))
    dm.setup()
    assert dm.tokenizer.get_vocab() == tok.get_vocab()


def test_tokenizer_from_errors(files, tmp_path):
    with pytest.raises(ConfigError, match=r"tokenizer_from=.*nowhere.*no such run directory"):
        module(files, vocab_size=None, tokenizer_from=str(tmp_path / "nowhere")).setup()
    (tmp_path / "empty" / "checkpoints").mkdir(parents=True)
    torch.save({"state_dict": {}}, tmp_path / "empty" / "checkpoints" / "last.ckpt")
    with pytest.raises(ConfigError, match=r"carries no tokenizer"):
        module(files, vocab_size=None, tokenizer_from=str(tmp_path / "empty")).setup()
    # a tokenizer of another program: BERT's special tokens are not at ids 0–4
    from attnflow.data.parallel import train_tokenizer

    other = train_tokenizer("wordpiece", ["a b c d e f"] * 3, 30)
    (tmp_path / "other" / "tokenizer").mkdir(parents=True)
    other.save(str(tmp_path / "other" / "tokenizer" / "wordpiece.json"))
    with pytest.raises(ConfigError, match=r"not a BERT WordPiece tokenizer.*\[CLS\]=2"):
        module(files, vocab_size=None, tokenizer_from=str(tmp_path / "other")).setup()
    # a vocabulary size is unread when the tokenizer comes from elsewhere: one warning
    with pytest.warns(UserWarning, match=r"vocab_size=\d+ is unread.*tokenizer_from"):
        module(files, tokenizer_from=str(tmp_path / "other"))


def test_collate_pads_any_lengths():
    import numpy as np

    batch = collate_texts([(np.array([CLS, 7, SEP]), 1), (np.array([CLS, 5, 6, 8, 9, SEP]), 0)])
    assert batch["input_ids"].tolist() == [[CLS, 7, SEP, PAD, PAD, PAD], [CLS, 5, 6, 8, 9, SEP]]
    assert batch["attention_mask"].sum(1).tolist() == [3, 6]


# -- the task --------------------------------------------------------------------------------------
class StandIn(nn.Module):
    """The model contract: hidden states and a classifier on position 0."""

    head = "sequence"

    def __init__(self, vocab=20, d=5, classes=3):
        super().__init__()
        self.emb, self.seg, self.cls = nn.Embedding(vocab, d), nn.Embedding(2, d), nn.Linear(d, classes)

    def forward(self, input_ids, segment_ids, attention_mask):
        return self.emb(input_ids) + self.seg(segment_ids)

    def classify_logits(self, hidden):
        return self.cls(hidden[:, 0])


def _batch():
    ids = torch.tensor([[CLS, 7, 8, SEP], [9, 10, SEP, PAD], [11, SEP, PAD, PAD], [12, 13, 14, SEP]])
    return {"input_ids": ids, "segment_ids": torch.zeros_like(ids), "attention_mask": ids != PAD,
            "labels": torch.tensor([0, 2, 1, 2])}


def test_task_loss_is_cross_entropy_by_hand_and_metrics():
    torch.manual_seed(0)
    task = TextClassificationTask(StandIn(), 3, ["a", "b", "c"])
    logs = {}
    task.log = lambda name, value, batch_size=None, **kw: logs.__setitem__(name, (value, batch_size))
    batch = _batch()
    loss = task.step(batch, "val")
    with torch.no_grad():
        m = task.model
        logits = m.cls(m.emb(batch["input_ids"][:, 0]) + m.seg.weight[0])  # ⟨CLS⟩'s state, segment 0
    hand = sum(math.log(sum(math.exp(v) for v in row)) - row[y]
               for row, y in zip(logits.tolist(), batch["labels"].tolist())) / 4
    assert float(loss.detach()) == pytest.approx(hand, rel=1e-5)
    pred = logits.argmax(-1)
    acc = float((pred == batch["labels"]).float().mean())
    assert float(logs["val/acc"][0].compute()) == pytest.approx(acc)
    # macro F1 by hand: per class 2·TP / (2·TP + FP + FN), classes absent from both count 0
    f1s = []
    for c in range(3):
        tp = int(((pred == c) & (batch["labels"] == c)).sum())
        fp = int(((pred == c) & (batch["labels"] != c)).sum())
        fn = int(((pred != c) & (batch["labels"] == c)).sum())
        f1s.append(2 * tp / (2 * tp + fp + fn) if tp + fp + fn else 0.0)
    assert float(logs["val/f1"][0].compute()) == pytest.approx(sum(f1s) / 3)
    assert logs["val/loss"][1] == 4


def test_task_registry_defaults():
    cfg = TASKS.validate({"name": "text_classification"})
    assert cfg["optim"]["optimizer"] == "adamw" and 2e-5 <= cfg["optim"]["lr"] <= 5e-5
    assert cfg["optim"]["scheduler"] == "linear" and cfg["optim"]["warmup_steps"] > 0
    assert (TextClassificationTask.monitor, TextClassificationTask.monitor_mode) == ("val/acc", "max")
    assert TextClassificationTask.interface == DATA.get("text_classification").interface


# -- the experiment ----------------------------------------------------------------------------------
TINY = ["model.d_model=32", "model.layers=2", "model.ffn_dim=64", "attention.heads=2",
        "trainer.accelerator=cpu", "callbacks.progress_bar=none", "logger=csv",
        "trainer.check_val_every_n_epoch=null"]


def test_experiment_composes_with_the_tokenizer_following_init_from(tmp_path):
    from attnflow.training.validate import resolve_config
    from support import compose_cfg

    cfg = resolve_config(compose_cfg(["experiment=bert_imdb", f"model.init_from={tmp_path}"]))
    assert (cfg["data"]["name"], cfg["model"]["name"], cfg["task"]["name"]) == (
        "text_classification", "bert", "text_classification")
    assert cfg["model"]["head"] == "sequence" and cfg["test"] is False
    assert cfg["data"]["tokenizer_from"] == str(tmp_path) == cfg["model"]["init_from"]
    cfg = resolve_config(compose_cfg(["experiment=bert_imdb"]))
    assert cfg["model"]["init_from"] is None and cfg["data"]["tokenizer_from"] is None


@pytest.mark.slow
def test_pretrain_then_finetune_end_to_end(tmp_path, caplog):
    """A tiny pretraining run on the review texts, then experiment=bert_imdb from it: the
    encoder is loaded (the report line), accuracy well above chance; an encoder of another width
    is refused before any training."""
    from attnflow.training.run import train
    from support import compose_cfg

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join(r["text"] + " " + r["text"] + "\n" for r in reviews(200, 5)))
    labelled = [write_jsonl(tmp_path / f"{s}.jsonl", reviews(n, seed)) for s, n, seed in
                (("train", 160, 6), ("dev", 60, 7))]
    pre = tmp_path / "pre"
    n_threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        train(compose_cfg(["experiment=bert_pretrain_imdb", f"data.train_path={corpus}",
                           f"data.val_path={corpus}", "data.limit_val=20", "data.vocab_size=80",
                           "data.max_len=32", "data.batch_size=16", *TINY, "trainer.max_steps=30",
                           "trainer.val_check_interval=30", "task.optim.lr=3e-3",
                           "task.optim.scheduler=none"]), pre)
        run = tmp_path / "ft"
        finetune = ["experiment=bert_imdb", f"model.init_from={pre}", f"data.train_path={labelled[0]}",
                    f"data.val_path={labelled[1]}", "data.test_path=", "data.batch_size=16", *TINY,
                    "model.dropout=0.0", "trainer.val_check_interval=1.0",
                    "trainer.check_val_every_n_epoch=1", "task.optim.lr=1e-3", "task.optim.scheduler=none"]
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="attnflow.models.bert"):
            # after a plateau at the majority class (0.55) validation accuracy jumps to 0.8–1.0
            # and stays there, by epoch 5–6 for most of 18 seeds, epoch 8 for one, later on
            # another CPU: 20 epochs leave room
            summary = train(compose_cfg([*finetune, "trainer.max_epochs=20"]), run)
        report = [r.getMessage() for r in caplog.records if r.name == "attnflow.models.bert"]
        assert len(report) == 1 and "loaded" in report[0] and str(pre) in report[0], report
        assert "new: classifier.weight, classifier.bias" in report[0], report
        assert summary["metrics"]["best/val/acc"] > 0.8, summary["metrics"]
        tokenizer = "tokenizer/wordpiece.json"  # the pretraining run's, saved with this run
        assert (run / tokenizer).read_text() == (pre / tokenizer).read_text()
        # another width: refused before training (no checkpoint written)
        with pytest.raises(ConfigError, match=r"model.d_model: checkpoint 32, this run 48"):
            train(compose_cfg(["experiment=bert_imdb", f"model.init_from={pre}",
                               f"data.train_path={labelled[0]}", f"data.val_path={labelled[1]}",
                               *TINY, "model.d_model=48"]), tmp_path / "wide")
        assert not list((tmp_path / "wide").glob("checkpoints/*.ckpt"))
        # resuming the fine-tuned run reads its own checkpoint, not the pretraining run, which
        # may have moved since
        pre.rename(tmp_path / "pre_moved")
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="attnflow.models.bert"):
            again = train(compose_cfg([*finetune, "trainer.max_epochs=21", f"resume={run}"]), run)
        assert again["epochs"] == 21 and again["global_step"] > summary["global_step"]
        assert not [r for r in caplog.records if r.name == "attnflow.models.bert"]
    finally:
        torch.set_num_threads(n_threads)
