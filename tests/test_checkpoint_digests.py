"""Checked checkpoints: every checkpoint attnflow writes has a sha256 digest beside it
(``<name>.sha256``); a reader refuses a file whose bytes differ from it in one line naming the
file, a resume falls back from a damaged ``last.ckpt`` to the newest intact checkpoint, and a
checkpoint without a digest (an older run's) is read with one warning line."""

from __future__ import annotations

import hashlib
import shutil
import warnings
from pathlib import Path

import pytest
import torch

from attnflow.cli.evaluate import main as evaluate
from attnflow.io.checkpoints import CheckpointError, read_checkpoint
from attnflow.io.console import AttnflowWarning
from attnflow.io.weights import atomic_torch_save
from attnflow.training.state import SafeCheckpointIO
from support import FAST, train_cli

ARGS = [*FAST, "data.train_size=128", "trainer.max_epochs=2", "logger=csv", "test=false"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A finished two-epoch run (top-k checkpoints and last.ckpt)."""
    run = tmp_path_factory.mktemp("digests") / "run"
    with pytest.MonkeyPatch.context() as mp:
        assert train_cli(mp, *ARGS, f"hydra.run.dir={run}") == 0
    return run


def _copy(run: Path, dst: Path) -> Path:
    shutil.copytree(run, dst)
    return dst


def _damage(path: Path) -> None:
    """4 KiB overwritten in the middle, the length kept."""
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle:middle + 4096] = bytes(4096)
    path.write_bytes(bytes(data))


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.slow
def test_every_checkpoint_of_a_run_has_the_digest_of_its_bytes(trained):
    ckpts = sorted((trained / "checkpoints").glob("*.ckpt"))
    assert len(ckpts) >= 2 and any(p.name == "last.ckpt" for p in ckpts)
    for path in ckpts:
        side = path.with_name(path.name + ".sha256")
        assert side.read_text() == f"{_sha(path)}  {path.name}\n", path
    sides = {p.name[:-len(".sha256")] for p in (trained / "checkpoints").glob("*.sha256")}
    assert sides == {p.name for p in ckpts}  # (top-k files removed took their digests along)
    assert not list(trained.rglob("*.tmp"))


def test_a_removed_checkpoint_takes_its_digest_and_a_rewrite_replaces_it(tmp_path):
    io, path = SafeCheckpointIO(), tmp_path / "a.ckpt"
    io.save_checkpoint({"state_dict": {"w": torch.ones(2)}}, path)
    first = (tmp_path / "a.ckpt.sha256").read_text()
    atomic_torch_save({"state_dict": {"w": torch.zeros(2)}}, path)
    assert (tmp_path / "a.ckpt.sha256").read_text() == f"{_sha(path)}  a.ckpt\n" != first
    io.remove_checkpoint(path)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_a_damaged_best_checkpoint_is_one_line_from_attnflow_eval(trained, tmp_path, capsys):
    run = _copy(trained, tmp_path / "run")
    best = next(p for p in (run / "checkpoints").glob("epoch*.ckpt"))
    for other in (run / "checkpoints").glob("*.ckpt"):  # (whichever eval would pick)
        _damage(other)
    assert evaluate([str(run), "split=val"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "do not match its digest" in err, err
    assert f"{run / 'checkpoints'}/" in err and "is damaged" in err
    with pytest.raises(CheckpointError, match=rf"^{best}: its bytes do not match its digest "
                                              rf"\({best.name}\.sha256\): the file is damaged$"):
        read_checkpoint(best)


@pytest.mark.slow
def test_a_damaged_last_ckpt_resumes_from_the_newest_intact_checkpoint(trained, tmp_path, capsys,
                                                                       monkeypatch):
    run = _copy(trained, tmp_path / "run")
    last = run / "checkpoints" / "last.ckpt"
    _damage(last)
    capsys.readouterr()
    assert train_cli(monkeypatch, f"resume={run}", "trainer.max_epochs=3") == 0
    err = capsys.readouterr().err
    said = [line for line in err.splitlines() if "newest intact checkpoint" in line]
    assert len(said) == 1 and str(last) in said[0] and "epoch" in said[0], err
    resumed = read_checkpoint(last)  # rewritten whole, with its digest
    assert resumed["epoch"] == 2 and (run / "resume-1.yaml").is_file()
    assert "epoch" in (run / "resume-1.yaml").read_text().split("checkpoint:")[1].splitlines()[0]


@pytest.mark.slow
def test_a_damaged_last_ckpt_without_an_intact_one_is_one_line(trained, tmp_path, monkeypatch,
                                                                capsys):
    run = _copy(trained, tmp_path / "run")
    for path in (run / "checkpoints").glob("*.ckpt"):
        _damage(path)
    assert train_cli(monkeypatch, f"resume={run}", "trainer.max_epochs=3") == 2
    err = capsys.readouterr().err.strip()
    assert "last.ckpt: its bytes do not match its digest" in err and "no other checkpoint" in err
    assert not (run / "resume-1.yaml").exists()


@pytest.mark.slow
def test_a_checkpoint_without_a_digest_loads_with_one_warning(trained, tmp_path):
    run = _copy(trained, tmp_path / "run")
    last = run / "checkpoints" / "last.ckpt"
    last.with_name("last.ckpt.sha256").unlink()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert read_checkpoint(last)["state_dict"]
        assert read_checkpoint(last)["state_dict"]  # once per file
    said = [w for w in caught if issubclass(w.category, AttnflowWarning)]
    assert len(said) == 1 and f"{last} has no digest" in str(said[0].message)
