"""A short real-data run: a small HAN on 2,000 IMDB documents (3 epochs in batches of 100: the
word GRU's steps, not the batch size, cost the time) learns (dev accuracy clearly above
chance), writes its vocabulary and validation renderings, and attnflow-predict reloads it from the
run directory (rebuilt from the registries) to label and explain new texts."""

from __future__ import annotations

import io
import json
import sys

import pytest

from attnflow.cli.predict import main as predict_main
from attnflow.inference.documents import load, predict
from attnflow.training.run import train
from support import DATA_DIR, compose_cfg

pytestmark = [pytest.mark.data, pytest.mark.slow]

SMALL = ["experiment=han_imdb", "data.limit_train=2000", "data.limit_val=200", "data.max_sentences=8",
         "data.max_words=25", "data.min_freq=3", "data.batch_size=100", "model.embed_dim=64",
         "model.word_encoder.hidden_dim=16", "model.sentence_encoder.hidden_dim=16", "pooling.dim=16",
         "task.optim.lr=0.01", "trainer.max_epochs=3", "callbacks.progress_bar=none", "logger=csv",
         "trainer.accelerator=cpu", "trainer.enable_model_summary=false", "task.renderings=2",
         "trainer.num_sanity_val_steps=0"]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    if not (DATA_DIR / "imdb" / "train.jsonl.gz").is_file():
        pytest.skip(f"IMDB data not found at {DATA_DIR / 'imdb'} (set ATTNFLOW_DATA_DIR)")
    run_dir = tmp_path_factory.mktemp("han_imdb")
    summary = train(compose_cfg(SMALL), run_dir)
    return run_dir, summary


def test_short_run_learns(run):
    run_dir, summary = run
    assert summary["metrics"]["best/val/acc"] > 0.65, summary["metrics"]  # chance 0.5; measured 0.76
    assert not any(k.startswith("test/") for k in summary["metrics"])  # no test split: skipped
    assert (run_dir / "vocab.json").is_file()
    import csv

    rows = list(csv.DictReader(open(next(run_dir.glob("csv/version_*/metrics.csv")))))
    train_acc = [float(r["train/acc"]) for r in rows if r.get("train/acc")]
    assert train_acc and all(0.0 <= a <= 1.0 for a in train_acc)  # training accuracy is logged
    html = sorted((run_dir / "renderings").glob("val_epoch*.html"))
    assert html and "rgba(30,90,220" in html[-1].read_text()


def test_predict_reloads_the_run_and_explains(run, tmp_path, capsys):
    run_dir, summary = run
    task, art = load(run_dir)
    texts = ["One of the best films I have ever seen. Wonderful acting, a brilliant and moving story.",
             "Awful. The worst movie ever made, boring and stupid. A waste of time.", ""]
    res = predict(task, art, texts)
    assert [r["label"] for r in res[:2]] == ["1", "0"]
    assert all(0.5 <= r["probability"] <= 1.0 for r in res)
    # weights: each sentence's word weights sum to 1, sentence weights sum to 1
    for r in res[:2]:
        assert abs(sum(r["sent_weights"]) - 1) < 1e-5
        assert all(abs(sum(w) - 1) < 1e-5 for w in r["word_weights"])
    assert res[2]["sentences"] == []  # an empty document is labelled, not crashed on
    out = tmp_path / "explain.html"
    assert predict_main([str(run_dir), texts[0], "--explain", str(out), "--json"]) == 0
    line = json.loads(capsys.readouterr().out.splitlines()[0])
    assert line["label"] == "1" and "brilliant" in out.read_text()


def test_predict_cli_reads_stdin_and_reports_bad_paths(run, tmp_path, capsys, monkeypatch):
    run_dir, _ = run
    # standard input as a pipe gives it: bytes under a text wrapper (the console script reads the bytes)
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO("great film\n".encode())))
    assert predict_main([str(run_dir)]) == 0
    assert capsys.readouterr().out.count("\t") == 2
    assert predict_main([str(tmp_path / "nowhere")]) == 2
    jl = tmp_path / "docs.jsonl"
    jl.write_text(json.dumps({"text": "A great film."}) + "\n" + json.dumps({"review": "x"}) + "\n")
    assert predict_main([str(run_dir), "--file", str(jl)]) == 2
    assert "docs.jsonl line 2 has no text field 'text'" in capsys.readouterr().err
    jl.write_text(json.dumps({"text": "A great film.", "id": 3}) + "\n")
    assert predict_main([str(run_dir), "--file", str(jl)]) == 0
