"""bench/gat_planetoid.py --val-only: choosing a recipe never evaluates the test split (two short
Cora runs; Lightning's ``Trainer.test`` is made to fail, so a test evaluation would end the run)."""

from __future__ import annotations

import json
import sys

import pytest
import torch

from support import DATA_DIR, load_bench

CORA = DATA_DIR / "planetoid" / "Cora" / "raw"


@pytest.mark.slow
@pytest.mark.skipif(not CORA.is_dir(), reason=f"Cora raw files not found at {CORA} (set ATTNFLOW_DATA_DIR)")
def test_val_only_reports_validation_and_never_runs_test(tmp_path, monkeypatch, capsys):
    import pytorch_lightning as pl

    bench = load_bench("gat_planetoid")
    monkeypatch.setattr(pl.Trainer, "test", lambda *a, **k: pytest.fail("Trainer.test ran under --val-only"))
    out = tmp_path / "gat.json"
    # no attention maps (4 nodes' pictures drawn at each run's end: half of a 2-epoch run's time)
    monkeypatch.setattr(sys, "argv", ["gat_planetoid.py", "--val-only", "--seeds", "2", "--first-seed", "100",
                                      "--override", "trainer.max_epochs=2",
                                      "--override", "callbacks.attention_maps=null", "--out", str(out)])
    threads = torch.get_num_threads()
    try:
        bench.main()
    finally:
        torch.set_num_threads(threads)  # the bench sets --threads (1) for the process
    result = json.loads(out.read_text())
    runs = result["accuracy"]["runs"]
    assert [r["seed"] for r in runs] == [100, 101]
    assert all("test_acc" not in r and 0.0 <= r["val_acc"] <= 1.0 for r in runs)
    assert "mean" not in result["accuracy"] and result["training_run"] is None  # no speed runs either
    assert result["accuracy"]["val_mean"] == pytest.approx(100 * sum(r["val_acc"] for r in runs) / 2)
    printed = capsys.readouterr().out
    assert "val acc mean" in printed and "seed 100: val" in printed
    assert "seed 100: test" not in printed and "Cora test acc" not in printed
