"""attnflow-translate: arguments, file, stdin, run dir or checkpoint, heat map, clear errors."""

import io
import sys

import pytest
import torch
import yaml

from attnflow.data.parallel import ParallelDataModule
from attnflow.registry import MODELS
from attnflow.translate import main

MODEL = {"name": "seq2seq", "embed_dim": 8, "encoder": {"name": "rnn", "hidden_dim": 8},
         "decoder": {"name": "rnn_attention", "embed_dim": 8, "hidden_dim": 16}}


@pytest.fixture
def run_dir(tmp_path):
    """A run directory as attnflow-train leaves it: config, tokenizers, a checkpoint."""
    root = tmp_path / "data"
    root.mkdir()
    (root / "train.de").write_text("Ein Mann schläft.\nZwei Hunde spielen.\n" * 5)
    (root / "train.en").write_text("A man sleeps.\nTwo dogs play.\n" * 5)
    data = {"name": "parallel", "root": str(root), "vocab_size": 60, "max_decode_len": 6}
    run = tmp_path / "run"
    dm = ParallelDataModule(**{k: v for k, v in data.items() if k != "name"})
    dm.set_run_dir(run)
    torch.manual_seed(0)
    model = MODELS.build(MODEL, **dm.model_context())
    (run / "checkpoints").mkdir(parents=True)
    cfg = {"data": data, "model": MODEL}
    (run / "config.yaml").write_text(yaml.safe_dump(cfg))
    torch.save({"state_dict": {f"model.{k}": v for k, v in model.state_dict().items()},
                "attnflow_config": cfg}, run / "checkpoints" / "last.ckpt")
    return run


def test_arguments_file_stdin_agree(run_dir, tmp_path, capsys, monkeypatch):
    assert main([str(run_dir), "Ein Mann schläft.", "Zwei Hunde."]) == 0
    by_args = capsys.readouterr().out.splitlines()
    assert len(by_args) == 2
    f = tmp_path / "in.de"
    f.write_text("Ein Mann schläft.\nZwei Hunde.\n")
    assert main([str(run_dir / "checkpoints" / "last.ckpt"), "-f", str(f)]) == 0
    assert capsys.readouterr().out.splitlines() == by_args
    monkeypatch.setattr(sys, "stdin", io.StringIO("Ein Mann schläft.\nZwei Hunde.\n"))
    assert main([str(run_dir), "--beam", "1"]) == 0
    assert capsys.readouterr().out.splitlines() == by_args
    assert main([str(run_dir), "Ein Mann schläft.", "--beam", "3"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 1


def test_attention_png(run_dir, tmp_path):
    out = tmp_path / "alpha.png"
    assert main([str(run_dir), "Ein Mann schläft.", "--attention", str(out)]) == 0
    assert out.is_file() and out.read_bytes()[:4] == b"\x89PNG"


def test_empty_line_is_reported_and_kept_aligned(run_dir, tmp_path, capsys):
    f = tmp_path / "in.de"
    f.write_text("Ein Mann.\n\nZwei Hunde.\n")
    assert main([str(run_dir), "-f", str(f)]) == 0
    cap = capsys.readouterr()
    assert len(cap.out.splitlines()) == 3 and cap.out.splitlines()[1] == ""
    assert "line 2 is empty" in cap.err


def test_errors_are_one_clear_line(run_dir, tmp_path, capsys):
    assert main([str(tmp_path / "missing"), "x"]) == 2
    assert "no such run directory or checkpoint" in capsys.readouterr().err
    assert main([str(run_dir), "-f", str(tmp_path / "nofile.txt")]) == 2
    assert "no such input file" in capsys.readouterr().err
    bad = tmp_path / "bad.ckpt"
    bad.write_text("not a checkpoint")
    assert main([str(bad), "x"]) == 2
    assert "cannot read checkpoint" in capsys.readouterr().err
    empty = tmp_path / "empty_run"
    empty.mkdir()
    assert main([str(empty), "x"]) == 2
    assert "without checkpoints" in capsys.readouterr().err
