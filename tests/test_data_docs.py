"""docs/data.md runs as written: each section's example files are written out and its command
trained (with smaller models and one short epoch), in a working directory of its own; and the
table readers (attnflow/data/tables.py) give the same rows from every format."""

from __future__ import annotations

import csv
import gzip
import json
import re
import shlex

import pytest
import torch
import yaml

from attnflow.data.errors import DataError
from attnflow.data.tables import read_table
from support import ROOT, compose_cfg, train_cli

DOC = ROOT / "docs" / "data.md"
SMALL = {"han_imdb": ["model.embed_dim=8", "model.word_encoder.hidden_dim=4",
                      "model.sentence_encoder.hidden_dim=4", "pooling.dim=4", "data.min_freq=1",
                      "task.renderings=0"],
         "mt_transformer": ["model.d_model=16", "model.ffn_dim=16", "model.encoder_layers=1",
                            "model.decoder_layers=1", "attention.heads=2", "data.vocab_size=60",
                            "task.beam_size=1"],
         "gat_graph": ["task.picture=false"],
         "self_attentive_imdb": ["model.embed_dim=8", "model.encoder.hidden_dim=4", "model.hops=2",
                                 "model.attn_dim=4", "model.mlp_dim=4", "data.min_freq=1"],
         "bert_imdb": ["model.d_model=16", "model.layers=1", "model.ffn_dim=16", "attention.heads=2",
                       "data.vocab_size=60", "data.max_len=16"],
         "captions": ["data.image_size=16", "model.decoder.embed_dim=8", "model.decoder.hidden_dim=8",
                      "task.beam_size=1"]}
QUIET = ["trainer.max_epochs=1", "callbacks.progress_bar=none", "callbacks.attention_maps.examples=0",
         "logger=csv"]


def section(title: str):
    """(files {name: text}, command argv) of a '## title' section: the fenced blocks after a line
    naming files in backticks (before any parenthesis) are those files, in order; the bash block
    is the command."""
    body = DOC.read_text(encoding="utf-8").split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]
    files, queue, command = {}, [], None
    for m in re.finditer(r"^([^\n]*)\n+```(\w+)\n(.*?)```", body, re.S | re.M):
        lead, lang, block = m.groups()
        if lang == "bash":
            command = shlex.split(block.replace("\\\n", " "))
        else:
            queue = re.findall(r"`([^`]+)`", lead.split("(")[0]) or queue
            files[queue.pop(0)] = block
    return files, command


def test_the_sections_name_their_files():
    files, command = section("Documents and texts")
    assert list(files) == ["reviews/train.csv"] and command[:2] == ["attnflow-train", "experiment=han_imdb"]
    files, command = section("Translation")
    assert list(files) == ["corpus/train.fr", "corpus/train.en"]
    files, command = section("Graphs")
    assert list(files) == ["graph/nodes.csv", "graph/edges.csv"]
    files, command = section("Image captions")
    assert list(files) == ["photos/captions.tsv"] and command[1] == "data=captions"
    files, command = section("Several tasks on your columns")
    assert list(files) == ["reviews/train.csv"] and command[1:3] == ["experiment=bert_imdb_multitask", "data=multitask"]


@pytest.mark.parametrize("title, copies, experiment", [
    ("Documents and texts", {"reviews/train.csv": "reviews/dev.csv"}, None),
    ("Documents and texts", {"reviews/train.csv": "reviews/dev.csv"}, "self_attentive_imdb"),
    ("Documents and texts", {"reviews/train.csv": "reviews/dev.csv"}, "bert_imdb"),
    ("Translation", {"corpus/train.fr": "corpus/dev.fr", "corpus/train.en": "corpus/dev.en"}, None),
    ("Graphs", {}, None),
    ("Image captions", {}, None),
])
@pytest.mark.slow
def test_the_documented_example_trains(tmp_path, monkeypatch, title, copies, experiment):
    """(``experiment``: the section's command with this experiment, as its text says works.)"""
    from PIL import Image

    from attnflow.training.run import train

    files, command = section(title)
    if experiment:
        command[1] = f"experiment={experiment}"
    monkeypatch.chdir(tmp_path)
    for name, text in files.items():
        for path in (name, *([copies[name]] if name in copies else [])):
            (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / path).write_text(text, encoding="utf-8")
    for k, image in enumerate(sorted({ln.split("\t")[0] for ln in files.get("photos/captions.tsv", "").split("\n") if ln})):
        (tmp_path / "photos" / "images").mkdir(parents=True, exist_ok=True)  # a plain colour each
        Image.new("RGB", (20, 16), (200 * k, 90, 40)).save(tmp_path / "photos" / "images" / image, "JPEG")
    experiment = next(a.split("=", 1)[1] for a in command if a.startswith(("experiment=", "data=")))
    summary = train(compose_cfg([*command[1:], *SMALL[experiment], *QUIET], return_hydra_config=True),
                    tmp_path / "run")
    assert summary["epochs"] == 1
    if title.startswith("Documents") and experiment != "bert_imdb":
        art = json.loads((tmp_path / "run" / "vocab.json").read_text())
        assert art["class_names"] == ["neg", "pos"]


@pytest.mark.slow
def test_several_tasks_on_your_columns_train_as_documented(tmp_path, monkeypatch):
    """The section's command as typed, through attnflow-train (no ~ or +): each task's metrics
    are logged, its labels are its column's values in the training file (sorted), the weights
    are as given, and Hydra records the command line as typed."""
    files, command = section("Several tasks on your columns")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "reviews").mkdir()
    for name in ("reviews/train.csv", "reviews/dev.csv"):
        (tmp_path / name).write_text(files["reviews/train.csv"], encoding="utf-8")
    small = ["model.d_model=16", "model.layers=1", "model.ffn_dim=16", "attention.heads=2",
             "data.common.vocab_size=60", "data.common.max_len=16", "trainer.accelerator=cpu", *QUIET]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        assert train_cli(monkeypatch, *command[1:], *small, f"hydra.run.dir={tmp_path / 'run'}") == 0
    finally:
        torch.set_num_threads(threads)
    with (tmp_path / "reviews" / "train.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    columns = {t: sorted({r[t] for r in rows}) for t in ("sentiment", "topic")}
    run = tmp_path / "run"
    assert json.loads((run / "labels.json").read_text()) == columns
    metrics = json.loads((run / "metrics.json").read_text())["metrics"]
    assert {f"val/{t}/{k}" for t in columns for k in ("loss", "acc", "f1")} <= set(metrics)
    assert metrics["val/loss"] == pytest.approx(metrics["val/sentiment/loss"] + 0.5 * metrics["val/topic/loss"],
                                                rel=1e-5)
    tasks = yaml.safe_load((run / "config.yaml").read_text())["task"]["tasks"]
    assert tasks == {t: {"weight": w, "task": {"name": "text_classification"}}
                     for t, w in (("sentiment", 1.0), ("topic", 0.5))}
    assert yaml.safe_load((run / ".hydra" / "overrides.yaml").read_text()) == [*command[1:], *small]


ROWS = [("A moving, \"brilliant\" film.", 1), ("Dull.\tToo long.", 0), ("Café au lait", 1)]


@pytest.mark.parametrize("name", ["r.jsonl", "r.jsonl.gz", "r.csv", "r.csv.gz", "r.tsv", "r.parquet"])
def test_every_format_gives_the_same_rows(tmp_path, name):
    path = tmp_path / name
    kind = name.split(".")[1]
    opener = gzip.open if name.endswith(".gz") else open
    if kind == "jsonl":
        with opener(path, "wt", encoding="utf-8") as f:
            f.writelines(json.dumps({"body": t, "y": y}) + "\n" for t, y in ROWS)
    elif kind == "parquet":
        pq = pytest.importorskip("pyarrow.parquet")
        import pyarrow as pa

        pq.write_table(pa.table({"body": [t for t, _ in ROWS], "y": [y for _, y in ROWS]}), path)
    else:
        rows = [(t.replace("\t", " ") if kind == "tsv" else t, y) for t, y in ROWS]
        with opener(path, "wt", encoding="utf-8", newline="") as f:
            writer = csv.writer(f, delimiter="," if kind == "csv" else "\t")
            writer.writerow(["y", "body"])
            writer.writerows([(y, t) for t, y in rows])
    want = [(t.replace("\t", " ") if kind == "tsv" else t, y) for t, y in ROWS]
    assert read_table(path, "body", "y") == want  # CSV's "1" read as the int 1
    with pytest.raises(DataError, match=rf"{name} (line|row) \d+: y=1 is not a class of data.labels"):
        read_table(path, "body", "y", classes=(["neg", "pos"], "data.labels"))
    with pytest.raises(DataError, match=r"has no (text field 'text'|column 'text')"):
        read_table(path, "text", "y")
