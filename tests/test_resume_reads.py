"""A run reads each of its checkpoint files at most twice, and a resume too (once to check what it
continues, once as Lightning restores it); a resume checks each block config of its run once."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from attnflow.config.registry import Registry
from attnflow.io import checkpoints
from support import FAST, train_cli

TINY = [*FAST, "data.train_size=64", "data.val_size=32", "data.test_size=32",
        "trainer.limit_train_batches=2", "trainer.limit_val_batches=1", "trainer.limit_test_batches=1",
        "trainer.enable_model_summary=false", "logger=none"]


def _counting(monkeypatch) -> tuple:
    """(checkpoint reads by file name, block config checks by (kind, config)) from now on."""
    reads, checks = Counter(), Counter()
    read, check = checkpoints.read_checkpoint, Registry._check

    def counted_read(path, *args, **kwargs):
        reads[Path(path).name] += 1
        return read(path, *args, **kwargs)

    def counted_check(self, data, path):
        checks[(self.kind, repr(sorted(data.items())))] += 1
        return check(self, data, path)

    monkeypatch.setattr(checkpoints, "read_checkpoint", counted_read)
    monkeypatch.setattr(Registry, "_check", counted_check)
    for registry in Registry._all.values():
        registry._checked.clear()
    return reads, checks


def test_a_run_and_its_resume_read_each_checkpoint_at_most_twice(tmp_path, monkeypatch):
    run = tmp_path / "run"
    reads, _ = _counting(monkeypatch)
    assert train_cli(monkeypatch, *TINY, f"hydra.run.dir={run}") == 0
    best = Path(checkpoints.find_checkpoint(run)[0]).name
    assert best != "last.ckpt" and reads[best] >= 1  # (validated and tested after the fit)
    assert max(reads.values()) <= 2, reads

    reads, checks = _counting(monkeypatch)
    assert train_cli(monkeypatch, f"resume={run}", "trainer.max_epochs=2") == 0
    assert (run / "resume-1.yaml").is_file()
    assert reads["last.ckpt"] >= 1 and max(reads.values()) <= 2, reads
    kinds = Counter(kind for kind, _ in checks)
    assert {"data", "model", "task"} <= set(kinds)
    assert max(checks.values()) == 1, [k for k, n in checks.items() if n > 1]
