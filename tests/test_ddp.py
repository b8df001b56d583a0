"""Data-parallel training on 2 CPU processes (gloo) through the Hydra entry point, checked against
a 1-process run; ddp_spawn's later stages; multirun + ddp refused before any work.

Equal-by-construction settings: the same global batch (2 ranks × 32 = 64 = the whole training
set, so every step sees every sequence whatever the sampler's order), sequences of one length
(every rank's batch has the same number of target tokens, so the mean of the ranks' token-means
is the 1-process token-mean) and no dropout — then DDP's averaged gradient is the 1-process
gradient and the metrics agree to float precision. The GAT graph is one full batch on each rank
(data.loader=full): DDP there is a redundant copy, not a speed-up (see docs/reliability.md).
A third run trains GAT on k-hop mini-batches, the loader under which the ranks share the work.

The default experiment's run goes through the console script (``trainer=ddp``: Lightning relaunches
the script for rank 1, which must write into the same run directory, logger run and checkpoints);
the two GAT runs test what DDP does with graph data, not the launch, so they fork their ranks in
this process (``ddp_fork``, as test_spawned_stages does; the console script's run where this
process has used CUDA): each relaunched rank of a console run is a fresh interpreter importing
torch and Lightning, seconds of CPU apiece on the suite's 2 cores.
"""

from __future__ import annotations

import json
import re
import os
import subprocess
import sys
from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch

from attnflow.training.distributed import check_multirun_strategy
from attnflow.config.registry import ConfigError
from attnflow.training.run import train
from support import ROOT, compose_cfg, train_cli

TRAIN = str(Path(sys.executable).parent / "attnflow-train")  # the console script, as users run it

REVERSE = ["data.train_size=64", "data.val_size=16", "data.test_size=16", "data.min_len=8",
           "data.max_len=8", "trainer.max_epochs=2", "trainer.accelerator=cpu",
           "callbacks.progress_bar=none", "callbacks.attention_maps.examples=0",
           "callbacks.checkpoint.monitor=val/loss"]  # the best checkpoint is the last one
GAT = ["experiment=gat_synthetic", "data.loader=full", "model.dropout=0", "model.attn_dropout=0",
       "model.value_dropout=0", "trainer.max_epochs=2", "trainer.accelerator=cpu",
       "callbacks.progress_bar=none", "task.picture=false"]
GAT_MINIBATCH = ["experiment=gat_synthetic", "trainer.max_epochs=2", "trainer.accelerator=cpu",
                 "logger=none", "callbacks.progress_bar=none", "task.picture=false"]
DDP = ["trainer=ddp", "trainer.devices=2", "trainer.accelerator=cpu"]


def _start(overrides, root):
    """Start a 2-process DDP run of the console script; the run directory is pinned, and any
    other run directory would appear under ``root/outputs``."""
    env = dict(os.environ, OMP_NUM_THREADS="1", ATTNFLOW_OUTPUT_DIR=str(root / "outputs"),
               HYDRA_FULL_ERROR="0")
    run = root / "ddp"
    log = open(root / "log.txt", "w")
    proc = subprocess.Popen([TRAIN, *overrides, *DDP, f"hydra.run.dir={run}"], cwd=ROOT, env=env,
                            stdout=log, stderr=subprocess.STDOUT, text=True)
    return proc, log, root


def _finish(started):
    """(exit status, console log) of a run :func:`_start` started, once it ends (killed after 5
    minutes)."""
    proc, log, root = started
    try:
        proc.wait(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
        log.close()
    return proc.returncode, (root / "log.txt").read_text()


@pytest.fixture(scope="module")
def ddp_runs(tmp_path_factory):
    """The console script's DDP run of the default experiment (its rank 1 relaunched by Lightning)."""
    root = tmp_path_factory.mktemp("reverse")
    return {"reverse": (*_finish(_start([*REVERSE, "data.batch_size=32"], root)), root)}


def _logged_once(run):
    """One logger run: CSV version_0 only, each epoch's validation logged once (not once per rank)."""
    assert [p.name for p in (run / "csv").iterdir()] == ["version_0"]
    rows = (run / "csv" / "version_0" / "metrics.csv").read_text().splitlines()
    header = rows[0].split(",")
    logged = {k: sum(bool(r.split(",")[header.index(k)]) for r in rows[1:]) for k in ("val/loss", "best/val/loss")}
    assert logged == {"val/loss": 2, "best/val/loss": 1}, rows  # 2 epochs; the best checkpoint's after


def _ddp_run(result):
    code, log, root = result
    run = root / "ddp"
    assert code == 0, log[-4000:]
    assert re.search(r"^[\d,]+ parameters, [\d.]+ MB; cpu × 2, precision", log, re.M), log[-4000:]
    # one run directory: rank 1 wrote into the pinned one, not a run dir of its own
    assert not (root / "outputs").exists(), list((root / "outputs").rglob("*"))[:10]
    _logged_once(run)
    return run, json.loads((run / "metrics.json").read_text())


class _Ranks(pl.Callback):
    """Each rank writes, at the start of its fit, its rank, the world size and the process
    group's backend (the test's own record of the processes that trained)."""

    def __init__(self, folder: Path):
        self.folder = folder

    def on_fit_start(self, trainer, pl_module):
        import torch.distributed as dist

        backend = dist.get_backend() if dist.is_initialized() else None
        (self.folder / f"rank{trainer.global_rank}.json").write_text(json.dumps(
            {"world_size": trainer.world_size, "backend": backend, "pid": os.getpid()}))


def _gat_ddp_run(overrides, root, monkeypatch):
    """``overrides`` trained by 2 ranks on gloo into ``root/ddp`` (returned), after checking that
    two processes trained. The ranks are forked from this process (ddp_fork), each recording its
    rank, world size, backend and process id; where this process has used CUDA (a forked rank
    cannot touch CUDA then: Lightning's isolate_rng reads the CUDA generators), the console
    script's run instead (trainer=ddp, as for the default experiment), read from its log."""
    import torch

    import attnflow.training.run as run_module

    run = root / "ddp"
    if torch.cuda.is_initialized():  # e.g. an earlier test of this pytest worker on a GPU machine
        code, text = _finish(_start(overrides, root))
        assert code == 0, text[-4000:]
        assert "Starting with 2 processes" in text and "distributed_backend=gloo" in text
        return run
    ranks = root / "ranks"
    ranks.mkdir(parents=True)
    build = run_module.build_callbacks
    monkeypatch.setattr(run_module, "build_callbacks", lambda *a, **k: [*build(*a, **k), _Ranks(ranks)])
    train(compose_cfg([*overrides, "trainer.strategy=ddp_fork", "trainer.devices=2"]), run)
    monkeypatch.undo()
    seen = {p.name: json.loads(p.read_text()) for p in ranks.iterdir()}
    assert sorted(seen) == ["rank0.json", "rank1.json"], seen
    assert all(r["world_size"] == 2 and r["backend"] == "gloo" for r in seen.values()), seen
    assert len({r["pid"] for r in seen.values()} | {os.getpid()}) == 3, seen  # two new processes
    return run


def _assert_same_metrics(ddp, one):
    assert ddp["global_step"] == one["global_step"] and ddp["epochs"] == one["epochs"]
    assert set(ddp["metrics"]) == set(one["metrics"])
    for key, value in one["metrics"].items():
        assert ddp["metrics"][key] == pytest.approx(value, rel=1e-4, abs=1e-6), key


@pytest.mark.slow
def test_ddp_default_experiment_equals_one_process(ddp_runs, tmp_path):
    run, ddp = _ddp_run(ddp_runs["reverse"])  # 2 ranks × 32
    one = train(compose_cfg([*REVERSE, "data.batch_size=64", "logger=none"]), tmp_path / "one")
    _assert_same_metrics(ddp, one)
    assert one["global_step"] == 2  # one step per epoch: the whole training set
    # one checkpoint set: the best and last.ckpt, no second copy from rank 1 (-v1)
    assert sorted(p.name for p in (run / "checkpoints").glob("*.ckpt")) == sorted(
        [Path(ddp["best_checkpoint"]).name, "last.ckpt"])
    assert Path(ddp["best_checkpoint"]).name == Path(one["best_checkpoint"]).name


@pytest.mark.slow
def test_ddp_gat_full_batch_equals_one_process(tmp_path, monkeypatch):
    run = _gat_ddp_run(GAT, tmp_path, monkeypatch)
    _logged_once(run)
    ddp = json.loads((run / "metrics.json").read_text())
    one = train(compose_cfg([*GAT, "logger=none"]), tmp_path / "one")
    _assert_same_metrics(ddp, one)
    assert [p.name for p in (run / "checkpoints").glob("*.ckpt")] == [Path(ddp["best_checkpoint"]).name]


@pytest.mark.slow
def test_ddp_gat_minibatch_training_splits_the_batches(tmp_path, monkeypatch):
    run = _gat_ddp_run(GAT_MINIBATCH, tmp_path, monkeypatch)
    summary = json.loads((run / "metrics.json").read_text())
    # 200 training nodes in k-hop batches of 64 seeds: 4 batches, 2 per rank and epoch
    assert summary["global_step"] == 4
    assert {"best/val/acc", "test/acc"} <= set(summary["metrics"])


@pytest.mark.slow
def test_spawned_stages_continue_one_csv_log(tmp_path):
    """ddp_spawn runs fit, validate and test each in new worker processes: the test stage used to
    crash rewriting metrics.csv and leave it cut to its header. Workers are forked here
    (ddp_fork: the same launcher as ddp_spawn, without re-importing torch in every worker)."""
    import torch

    if torch.cuda.is_initialized():  # an earlier test in this pytest worker ran on the GPU
        pytest.skip("a forked worker cannot touch CUDA once its parent has (Lightning's "
                    "isolate_rng reads the CUDA generators); run this file alone on a GPU machine")
    overrides = ["data.train_size=64", "data.val_size=32", "data.test_size=32", "data.batch_size=16",
                 "trainer.max_epochs=1", "trainer.accelerator=cpu", "callbacks.progress_bar=none",
                 "callbacks.attention_maps.examples=1", "trainer.strategy=ddp_fork",
                 "trainer.devices=2", "trainer.log_every_n_steps=1"]
    summary = train(compose_cfg(overrides), tmp_path)
    assert summary["global_step"] == 2 and summary["epochs"] == 1  # 64 / (2 × 16), from the workers
    assert {"val/loss", "best/val/loss", "test/loss"} <= set(summary["metrics"])
    assert [p.name for p in (tmp_path / "csv").iterdir()] == ["version_0"]
    lines = (tmp_path / "csv" / "version_0" / "metrics.csv").read_text().splitlines()
    header = lines[0].split(",")
    assert {"train/loss", "val/loss", "test/loss"} <= set(header)
    col = {k: [r.split(",")[header.index(k)] for r in lines[1:]] for k in header}
    assert sum(bool(v) for v in col["train/loss"]) == 2  # rank 0 logs its 2 steps, once
    assert sum(bool(v) for v in col["val/loss"]) == 1  # fit's epoch
    assert sum(bool(v) for v in col["best/val/loss"]) == 1  # the final validation
    assert [float(v) for v in col["test/loss"] if v] == [pytest.approx(summary["metrics"]["test/loss"])]


@pytest.mark.slow
def test_ddp_spawn_reports_the_metrics_its_epoch_showed_and_attnflow_eval_gives(tmp_path, capsys):
    """Spawned workers (a pickled module, unlike ddp_fork's) used to validate the best checkpoint
    counting metric states the fit handed back (metrics.json's val/token_acc 0.1256 where the
    epoch line and attnflow-eval gave 0.1479), and to log it at step 0. Its val/loss was 0.13 %
    high: Lightning's synced mean floors half of an odd count of target tokens (779 here)."""
    from attnflow.cli.evaluate import main as evaluate

    overrides = ["data.train_size=256", "data.val_size=70", "data.batch_size=32", "trainer.max_epochs=1",
                 "trainer.accelerator=cpu", "callbacks.progress_bar=none", "callbacks.attention_maps.examples=0",
                 "trainer=ddp_spawn", "trainer.devices=2", "test=false", "trainer.enable_model_summary=false"]
    summary = train(compose_cfg(overrides), tmp_path)
    lines = (tmp_path / "csv" / "version_0" / "metrics.csv").read_text().splitlines()
    header = lines[0].split(",")
    col, best, step = header.index("val/token_acc"), header.index("best/val/token_acc"), header.index("step")
    rows = [r.split(",") for r in lines[1:] if r.split(",")[col] or r.split(",")[best]]
    n = summary["global_step"]  # as in one process: the epoch's validation at step n - 1, the final at n
    assert [int(r[step]) for r in rows] == [n - 1, n]
    epoch, final = float(rows[0][col]), float(rows[1][best])
    assert epoch == pytest.approx(summary["metrics"]["val/token_acc"], abs=1e-7)  # (from the workers)
    assert epoch == final == pytest.approx(summary["metrics"]["best/val/token_acc"], abs=1e-7)  # one epoch
    assert evaluate([str(tmp_path), "split=val", "-o", str(tmp_path / "val.json")]) == 0
    got = json.loads((tmp_path / "val.json").read_text())["metrics"]
    assert got["val/token_acc"] == pytest.approx(summary["metrics"]["best/val/token_acc"], abs=1e-7)
    assert got["val/seq_acc"] == pytest.approx(summary["metrics"]["best/val/seq_acc"], abs=1e-7)
    assert got["val/loss"] == pytest.approx(summary["metrics"]["best/val/loss"], rel=1e-6)


@pytest.mark.slow
def test_multirun_with_ddp_is_refused_before_any_work(tmp_path, monkeypatch, capsys):
    """Through the console script's entry point, in this process (Hydra runs the jobs of a basic
    multirun here; no torch import to wait for)."""
    sweep = tmp_path / "sweep"
    code = train_cli(monkeypatch, "-m", "scorer=dot,general", *DDP,
                     "callbacks.progress_bar=none", f"hydra.sweep.dir={sweep}")
    err = capsys.readouterr().err
    assert code == 2, err
    assert "attnflow: config error: a multirun (-m) with trainer.strategy=ddp" in err
    assert "trainer=ddp_spawn" in err and "submitit" in err and "Traceback" not in err
    # refused in the job before any work


@pytest.mark.parametrize("trainer, multirun, refused", [
    ({"strategy": "ddp", "devices": 2, "accelerator": "cpu"}, True, True),
    ({"strategy": "ddp_find_unused_parameters_true", "devices": "2", "accelerator": "cpu"}, True, True),
    ({"strategy": "ddp", "devices": 1, "num_nodes": 2}, True, True),
    # (a machine without two GPUs: Lightning refuses the devices when the run builds its Trainer)
    ({"strategy": "fsdp", "devices": [0, 1]}, True, torch.cuda.device_count() >= 2),
    ({"strategy": "ddp", "devices": 2}, False, False),          # a single run: Lightning relaunches it
    ({"strategy": "ddp_spawn", "devices": 2}, True, False),     # workers spawned inside the job
    ({"strategy": "ddp", "devices": 1}, True, False),           # one process: nothing relaunched
    ({"strategy": "ddp", "devices": "auto", "accelerator": "cpu"}, True, False),  # auto on CPU: 1
    ({"devices": 2}, True, False),                              # strategy auto
])
def test_multirun_strategy_rule(trainer, multirun, refused, monkeypatch):
    for var in ("SLURM_NTASKS", "TORCHELASTIC_RUN_ID", "LSB_JOBID"):
        monkeypatch.delenv(var, raising=False)
    if refused:
        with pytest.raises(ConfigError, match="ddp_spawn.*submitit"):
            check_multirun_strategy(trainer, multirun)
    else:
        check_multirun_strategy(trainer, multirun)


def test_multirun_ddp_inside_a_slurm_or_torchrun_job_is_allowed(monkeypatch):
    """There the scheduler starts one process per rank and Lightning relaunches nothing."""
    trainer = {"strategy": "ddp", "devices": 2}
    monkeypatch.delenv("TORCHELASTIC_RUN_ID", raising=False)
    monkeypatch.setenv("SLURM_NTASKS", "2")
    monkeypatch.setenv("SLURM_JOB_NAME", "sweep")
    check_multirun_strategy(trainer, True)
    monkeypatch.delenv("SLURM_NTASKS")
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "sweep-job")  # what torchrun sets
    check_multirun_strategy(trainer, True)


def _sharded(loader, world: int = 2):
    """The batches of each rank, as Lightning makes them under DDP: it re-creates the training
    loader with a DistributedSampler per rank (its private helpers, the very code path)."""
    from pytorch_lightning.trainer.states import RunningStage
    from pytorch_lightning.utilities.data import _update_dataloader
    from torch.utils.data import DistributedSampler

    out = []
    for rank in range(world):
        sampler = DistributedSampler(loader.dataset, num_replicas=world, rank=rank, shuffle=True, seed=0)
        out.append(list(_update_dataloader(loader, sampler, mode=RunningStage.TRAINING)))
    return out


@pytest.mark.parametrize("family", ["documents", "parallel"])
def test_bucketed_training_batches_are_split_over_ranks(family, tmp_path):
    """Translation and documents batch by length (a batch sampler): under DDP Lightning must be
    able to hand each rank its share — it used to refuse ("can't inject a (distributed) sampler")."""
    from lightning_fabric.utilities.data import _replace_dunder_methods
    from torch.utils.data import BatchSampler

    from attnflow.data.documents import DocumentDataModule
    from attnflow.data.parallel import ParallelDataModule

    n = 50
    if family == "documents":
        path = tmp_path / "docs.jsonl"
        path.write_text("".join(json.dumps({"text": "word " * (i % 7 + 1), "label": i % 2}) + "\n"
                                for i in range(n)))
        dm = DocumentDataModule(train_path=str(path), val_path=str(path), batch_size=8, min_freq=1)
        key = "labels"
    else:
        for split in ("train", "val", "test_2016_flickr"):
            for lang in ("de", "en"):
                (tmp_path / f"{split}.{lang}").write_text("".join(f"{'w ' * (i % 9 + 1)}{i}\n" for i in range(n)))
        dm = ParallelDataModule(root=str(tmp_path), vocab_size=80, batch_size=8)
        key = "idx"
    with _replace_dunder_methods(BatchSampler):  # as Lightning calls the *_dataloader hooks
        loader = dm.train_dataloader()
    ranks = _sharded(loader)
    assert len(ranks[0]) == len(ranks[1]) == 4  # 25 items per rank in batches of 8: 4 batches
    items = [sum(len(b[key]) for b in batches) for batches in ranks]
    assert items == [25, 25]
    if family == "parallel":  # every line once: 50 items split 25 + 25
        assert sorted(i for batches in ranks for b in batches for i in b["idx"].tolist()) == list(range(n))
