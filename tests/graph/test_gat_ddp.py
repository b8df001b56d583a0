"""Mini-batch GAT training under 2-process DDP on the CPU (gloo), through the command line
(`trainer=ddp` relaunches the script for rank 1)."""

import json
import os
import subprocess
import sys

from support import ROOT


def test_two_process_ddp_minibatch_training(tmp_path):
    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "attnflow.train", "experiment=gat_synthetic", "trainer=ddp",
           "trainer.devices=2", "trainer.accelerator=cpu", "trainer.max_epochs=2", "logger=none",
           "callbacks.progress_bar=none", "task.picture=false", f"hydra.run.dir={run}"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-3000:]
    assert "Starting with 2 processes" in log and "distributed_backend=gloo" in log
    summary = json.loads((run / "metrics.json").read_text())
    # 200 training nodes in k-hop batches of 64 seeds: 4 batches, 2 per rank and epoch
    assert summary["global_step"] == 4
    assert {"val/acc", "test/acc"} <= set(summary["metrics"])
