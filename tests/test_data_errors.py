"""A broken data file stops the run with one message naming the file (and the line), before any
checkpoint is written and without touching what is already there: truncated gzip (Multi30k,
IMDB), a malformed JSON line, an empty IMDB file, a label outside the classes, empty Multi30k
files, empty or truncated Planetoid raw files, an edge to a missing node. The broken files are
made here, in temporary folders."""

from __future__ import annotations

import gzip
import json
import pickle
import zlib
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
import torch

from attnflow.data.documents import DocumentDataModule
from attnflow.data.errors import DataError
from attnflow.data.parallel import ParallelDataModule
from attnflow.data.planetoid import read_planetoid
from attnflow.config.registry import ConfigError
from attnflow.training.run import train
from support import compose_cfg, train_cli

SENTENCES = [("ein mann schläft .", "a man sleeps ."), ("eine frau liest .", "a woman reads ."),
             ("zwei hunde spielen .", "two dogs play ."), ("ein kind lacht .", "a child laughs .")]


def _gz(path: Path, text: str) -> Path:
    path.write_bytes(gzip.compress(text.encode("utf-8")))
    return path


def _cut(path: Path, keep: float = 0.5) -> Path:
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])
    return path


def _parallel_files(root: Path, n: int = 400) -> Path:
    """Multi30k's layout: <split>.<lang>.gz, line-aligned; large enough that half of a gzip
    stream holds whole lines."""
    root.mkdir(parents=True, exist_ok=True)
    for split in ("train", "val", "test_2016_flickr"):
        for k, lang in enumerate(("de", "en")):
            lines = [f"{SENTENCES[i % 4][k]} {i}" for i in range(n)]
            _gz(root / f"{split}.{lang}.gz", "\n".join(lines) + "\n")
    return root


def _documents(path: Path, n: int = 400) -> Path:
    rows = [{"text": f"Review {i}: it was {'great' if i % 2 else 'awful'}.", "label": i % 2}
            for i in range(n)]
    return _gz(path, "\n".join(json.dumps(r) for r in rows) + "\n")


# -- gzip cut short -----------------------------------------------------------------------------
def test_truncated_multi30k_gzip_names_the_file_and_line(tmp_path):
    root = _parallel_files(tmp_path / "m30k")
    _cut(root / "val.en.gz")
    dm = ParallelDataModule(root=str(root), vocab_size=100)
    with pytest.raises(DataError, match=r"val\.en\.gz ends early after line \d+: the gzip stream is truncated"):
        dm.model_context()  # a fresh run reads every split before any work


def test_truncated_imdb_gzip_names_the_file_and_line(tmp_path):
    train_file = _cut(_documents(tmp_path / "train.jsonl.gz"))
    whole_lines = zlib.decompressobj(31).decompress(train_file.read_bytes()).count(b"\n")
    dm = DocumentDataModule(train_path=str(train_file), val_path=str(train_file))
    with pytest.raises(DataError) as err:
        dm.setup()
    msg = str(err.value)
    assert str(train_file) in msg and "gzip stream is truncated" in msg
    line = int(msg.split("after line ")[1].split(":")[0])
    assert 0 < line <= whole_lines < 400  # at most the whole lines the cut stream still holds


# -- JSON lines ---------------------------------------------------------------------------------
@pytest.mark.parametrize("bad, why", [('{"text": "fine", "label": 1', "is not valid JSON"),
                                      ('["text", 1]', "is JSON list, not an object")])
def test_malformed_json_line_names_the_file_and_line(tmp_path, bad, why):
    good = [json.dumps({"text": f"doc {i}.", "label": i % 2}) for i in range(4)]
    path = _gz(tmp_path / "dev.jsonl.gz", "\n".join(good[:2] + [bad] + good[2:]) + "\n")
    dm = DocumentDataModule(train_path=str(_documents(tmp_path / "train.jsonl.gz")), val_path=str(path))
    with pytest.raises(DataError, match=rf"{path} line 3 {why}"):
        dm.setup()


def test_empty_imdb_file_is_named_not_a_key_error(tmp_path):
    empty = tmp_path / "train.jsonl"
    empty.write_text("\n\n")
    dm = DocumentDataModule(train_path=str(empty), val_path=str(_documents(tmp_path / "dev.jsonl.gz")))
    with pytest.raises(DataError, match=rf"{empty} holds no documents"):
        dm.setup()


def test_cli_prints_a_data_error_without_traceback_and_writes_nothing(tmp_path, monkeypatch, capsys):
    """Through the console script's entry point (in this process: no torch import to wait for)."""
    empty = _gz(tmp_path / "train.jsonl.gz", "")
    run = tmp_path / "run"
    code = train_cli(monkeypatch, "experiment=han_imdb", f"data.train_path={empty}",
                     f"data.val_path={_documents(tmp_path / 'dev.jsonl.gz')}",
                     "callbacks.progress_bar=none", f"hydra.run.dir={run}")
    err = capsys.readouterr().err
    assert code == 2, err
    assert f"attnflow: data error: data 'documents': {empty} holds no documents" in err
    assert "Traceback" not in err and "KeyError" not in err
    assert not (run / "checkpoints").exists() and not (run / "metrics.json").exists()


# -- labels -------------------------------------------------------------------------------------
def _with_line(path: Path, n: int, row: dict) -> Path:
    """``path``'s JSON lines with line ``n`` replaced by ``row``."""
    lines = gzip.decompress(path.read_bytes()).decode().splitlines()
    lines[n - 1] = json.dumps(row)
    return _gz(path, "\n".join(lines) + "\n")


@pytest.mark.parametrize("label, why", [
    (-1, "label=-1 is not a class of data.labels (0, 1)"),
    (5, "label=5 is not a class of data.labels (0, 1)"),
    ("pos", "label='pos' is not a class of data.labels (0, 1)"),
    (None, "label=None is not a class of data.labels (0, 1)")])
def test_a_label_outside_the_declared_classes_is_one_line_naming_file_line_and_value(tmp_path, monkeypatch,
                                                                                     capsys, label, why):
    """data.labels=[0, 1] given; one line of another label stops the run (it used to add a
    class)."""
    train_file = _with_line(_documents(tmp_path / "train.jsonl.gz"), 7, {"text": "odd.", "label": label})
    run = tmp_path / "run"
    code = train_cli(monkeypatch, "experiment=han_imdb", f"data.train_path={train_file}",
                     f"data.val_path={_documents(tmp_path / 'dev.jsonl.gz')}", "data.test_path=",
                     "data.labels=[0,1]", "callbacks.progress_bar=none", f"hydra.run.dir={run}")
    assert code == 2
    err = capsys.readouterr().err  # (after the line on the preset's facts given way)
    assert err.splitlines()[-1] == f"attnflow: data error: data 'documents': {train_file} line 7: {why}"
    assert "Traceback" not in err and not run.exists()


def test_string_labels_are_classes_in_the_order_data_labels_gives(tmp_path):
    rows = [{"text": f"doc {i}.", "label": ["neg", "pos"][i % 2]} for i in range(6)]
    path = _gz(tmp_path / "train.jsonl.gz", "\n".join(json.dumps(r) for r in rows) + "\n")
    dm = DocumentDataModule(train_path=str(path), val_path=str(path), labels=["pos", "neg"], min_freq=1)
    dm.setup()
    assert dm.label_values == ["pos", "neg"] and list(dm.splits["train"].labels) == [1, 0, 1, 0, 1, 0]
    assert DocumentDataModule(train_path=str(path), val_path=str(path), min_freq=1).task_context()[
        "class_names"] == ["neg", "pos"]  # no data.labels: the training file's, sorted


def test_without_data_labels_a_file_mixing_label_types_or_a_label_unseen_in_training_is_named(tmp_path):
    train_file = _with_line(_documents(tmp_path / "train.jsonl.gz"), 5, {"text": "odd.", "label": "1"})
    with pytest.raises(DataError, match=rf"{train_file} line 5: label='1' is a str, the file's first "
                                        r"label 0 a int: labels are all ints or all strings"):
        DocumentDataModule(train_path=str(train_file), val_path=str(train_file)).setup()
    dev = _with_line(_documents(tmp_path / "dev.jsonl.gz", 20), 3, {"text": "odd.", "label": 2})
    with pytest.raises(DataError, match=rf"{dev} line 3: label=2 is not a class of the labels of .*train2"):
        DocumentDataModule(train_path=str(_documents(tmp_path / "train2.jsonl.gz")), val_path=str(dev)).setup()
    with pytest.raises(ValueError, match=r"labels=\[0, 'a'\] must list two or more distinct classes"):
        DocumentDataModule(train_path=str(dev), val_path=str(dev), labels=[0, "a"])


# -- empty Multi30k files -------------------------------------------------------------------------
@pytest.mark.parametrize("split", ["train", "val"])
def test_empty_multi30k_file_fails_the_run_before_any_checkpoint(tmp_path, split):
    root = _parallel_files(tmp_path / "m30k", n=40)
    empty = _gz(root / f"{split}.de.gz", "")
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    earlier = {run / "metrics.json": b'{"metrics": {"val/bleu": 12.5}}',
               run / "checkpoints" / "last.ckpt": b"an earlier run's checkpoint"}
    for path, data in earlier.items():
        path.write_bytes(data)
    cfg = compose_cfg(["experiment=mt_rnnsearch", f"data.root={root}", "data.vocab_size=100",
                       "trainer.max_epochs=1", "callbacks.progress_bar=none", "logger=none"])
    with pytest.raises(DataError, match=rf"{empty} is empty \(0 lines"):
        train(cfg, run)
    assert all(path.read_bytes() == data for path, data in earlier.items())  # nothing overwritten
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["last.ckpt"]
    assert not (run / "tokenizer").exists()


def test_a_missing_data_file_is_a_data_error_and_a_file_not_found_error(tmp_path):
    with pytest.raises(DataError, match=r"missing file .*train\.de") as err:
        ParallelDataModule(root=str(tmp_path)).model_context()
    assert isinstance(err.value, FileNotFoundError) and isinstance(err.value, ConfigError)


# -- Planetoid raw files ------------------------------------------------------------------------
def _planetoid(root: Path) -> Path:
    """A tiny graph in Planetoid's raw layout: 6 labelled training nodes, 500 more in allx (PyG
    takes the 500 after the training nodes as validation), 8 test nodes listed in test.index."""
    raw = root / "Cora" / "raw"
    raw.mkdir(parents=True)
    rng = np.random.default_rng(0)
    n_train, n_all, n_test, classes = 6, 506, 8, 3
    onehot = lambda n: np.eye(classes, dtype=np.int64)[rng.integers(0, classes, n)]  # noqa: E731
    arrays = {"x": rng.random((n_train, 4)), "y": onehot(n_train), "allx": rng.random((n_all, 4)),
              "ally": onehot(n_all), "tx": rng.random((n_test, 4)), "ty": onehot(n_test)}
    for name, arr in arrays.items():
        (raw / f"ind.cora.{name}").write_bytes(pickle.dumps(arr, protocol=2))
    n = n_all + n_test
    graph = defaultdict(list, {i: [(i + 1) % n, (i - 1) % n] for i in range(n)})
    (raw / "ind.cora.graph").write_bytes(pickle.dumps(graph, protocol=2))
    (raw / "ind.cora.test.index").write_text("".join(f"{i}\n" for i in range(n_all, n)))
    return raw


def test_the_tiny_planetoid_files_are_valid(tmp_path):
    _planetoid(tmp_path)
    data = read_planetoid(tmp_path, "Cora")
    assert data.num_nodes == 514 and int(data.train_mask.sum()) == 6
    assert int(data.val_mask.sum()) == 500 and int(data.test_mask.sum()) == 8


@pytest.mark.parametrize("name, damage, why", [
    ("x", "empty", "ends early: it is truncated or empty"),
    ("allx", "half", "pickle data was truncated"),
    ("graph", "half", "cannot read"),
    ("ty", "empty", "ends early"),
    ("test.index", "empty", "looks truncated or empty"),
    ("test.index", "lines", "looks truncated or empty"),  # cut at a line end: parses without error
])
def test_empty_or_truncated_planetoid_file_is_named(tmp_path, name, damage, why):
    raw = _planetoid(tmp_path)
    path = raw / f"ind.cora.{name}"
    if damage == "empty":
        path.write_bytes(b"")
    elif damage == "half":
        _cut(path)
    else:
        path.write_text("".join(path.read_text().splitlines(keepends=True)[:5]))
    with pytest.raises(DataError, match=rf"{path}.*{why}|{why}.*{path}") as err:
        read_planetoid(tmp_path, "Cora")
    assert str(path) in str(err.value)


@pytest.mark.slow
def test_an_edge_to_a_missing_node_is_refused_naming_the_file_and_a_graph_without_edges_trains(
        tmp_path, monkeypatch, capsys):
    raw = _planetoid(tmp_path / "far")
    graph = defaultdict(list, {i: [(i + 1) % 514] for i in range(514)})
    graph[3].append(9999)
    (raw / "ind.cora.graph").write_bytes(pickle.dumps(graph, protocol=2))
    with pytest.raises(DataError, match=rf"{raw}/ind.cora.graph: node 3 lists neighbour 9999, but the "
                                        r"graph has 514 nodes \(ids 0 to 513\)"):
        read_planetoid(tmp_path / "far", "Cora")
    raw = _planetoid(tmp_path / "none")
    (raw / "ind.cora.graph").write_bytes(pickle.dumps(defaultdict(list), protocol=2))
    data = read_planetoid(tmp_path / "none", "Cora")
    assert data.edge_index.shape == (2, 0) and data.edge_index.dtype == torch.long
    assert train_cli(monkeypatch, "experiment=gat_cora", f"data.root={tmp_path / 'none'}", "test=false",
                     "trainer.max_epochs=1", "callbacks.progress_bar=none",
                     f"hydra.run.dir={tmp_path / 'run'}") == 0  # each node attends to itself
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["metrics"]["best/val/acc"] >= 0
