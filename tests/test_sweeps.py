"""Sweeps: the hparams_search group (a grid with Hydra's basic sweeper, Optuna TPE studies that
continue from their sqlite storage), the metric a job returns, the launchers' configs, and the
message when a sweep's plugin is not installed."""

from __future__ import annotations

import itertools
import json
import logging
import math
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

from attnflow.config.registry import ConfigError, MODELS, DATA
from attnflow.training.validate import resolve_config
from attnflow.config.sweeps import (check_optimized_metric, check_sweep_values, final_metric_names,
                             missing_plugin, required_plugins)
from support import CONF, FAST, compose_cfg, train_cli

TRAIN = str(Path(sys.executable).with_name("attnflow-train"))
# the default experiment, a few steps: 2 training batches, 1 validation and 1 test batch
TINY = ["data.train_size=64", "data.val_size=16", "data.test_size=16", "data.batch_size=32",
        "trainer.accelerator=cpu", "trainer.max_epochs=1", "trainer.enable_model_summary=false",
        "trainer.num_sanity_val_steps=0", "callbacks.attention_maps=null", "logger=csv"]
# GAT on a generated graph of 120 nodes: one mini-batch per epoch (for Optuna trials)
TINY_GRAPH = ["experiment=gat_synthetic", "data.num_nodes=120", "trainer.max_epochs=1", "task.picture=false",
              "callbacks.attention_maps=null", "trainer.accelerator=cpu", "callbacks.progress_bar=none", "logger=csv"]


def _env():
    return dict(os.environ, OMP_NUM_THREADS="1", HYDRA_FULL_ERROR="0")


def _job_configs(sweep: Path):
    """{job number: resolved config} of a sweep folder's job subfolders."""
    return {int(p.parent.name): yaml.safe_load(p.read_text())
            for p in sweep.glob("[0-9]*/config.yaml")}


# -- the search configs --------------------------------------------------------------------------------
def _sweeper(name, *overrides):
    return compose_cfg([f"hparams_search={name}", *overrides], return_hydra_config=True)


def test_grid_sweeps_every_scorer_the_default_model_builds_with():
    cfg = _sweeper("reverse_grid")
    params = cfg.hydra.sweeper.params
    assert cfg.hydra.sweeper._target_.endswith("BasicSweeper") and cfg.hydra.mode.name == "MULTIRUN"
    run = resolve_config(compose_cfg(["data.train_size=8"]))
    context = DATA.build(run["data"], path="data").model_context()

    def swap(node, scorer):  # the default model's config with another scorer wherever it has one
        if node == run["scorer"]:
            return scorer
        if isinstance(node, dict):
            return {k: swap(v, scorer) for k, v in node.items()}
        return node

    builds = []
    for path in sorted((CONF / "scorer").glob("*.yaml")):
        node = OmegaConf.to_container(OmegaConf.load(path))
        if node["name"] != path.stem:  # a preset of a registered scorer (gat_authors: gat + options)
            continue
        model = swap(run["model"], node)
        assert model != run["model"] or path.stem == run["scorer"]["name"]
        MODELS.validate(model, "model")
        MODELS.build(model, path="model", **context)  # raises if the scorer does not fit
        builds.append(path.stem)
    assert sorted(params.scorer.split(",")) == builds
    assert len(str(params["++task.optim.lr"]).split(",")) == 2
    assert cfg.optimized_metric in final_metric_names(cfg)


@pytest.mark.parametrize("name, experiment, dataset_field", [
    ("gat_cora_optuna", "gat_cora", ("dataset", "Cora")),
    ("han_imdb_optuna", "han_imdb", ("limit_train", 5000)),
])
def test_optuna_searches_compose_and_every_key_is_a_field(name, experiment, dataset_field):
    cfg = _sweeper(name, "hydra.sweep.dir=/somewhere/sweep")
    sweeper = cfg.hydra.sweeper
    assert sweeper._target_.endswith("OptunaSweeper") and sweeper.sampler._target_.endswith("TPESampler")
    assert sweeper.storage == "sqlite:////somewhere/sweep/optuna.db"  # in the sweep folder
    assert sweeper.study_name == name and sweeper.direction == "maximize"
    assert cfg.hydra.runtime.choices.experiment == experiment
    key, value = dataset_field
    assert cfg.data[key] == value
    assert check_optimized_metric(cfg) == cfg.optimized_metric
    # each search key, set to a value inside its range, is a field the run validates and uses
    values = {}
    for key, spec in sweeper.params.items():
        numbers = [float(x) for x in re.findall(r"[\d.]+(?:e-?\d+)?", spec)]
        values[key] = int(numbers[0]) if spec.startswith("choice") else (numbers[0] + numbers[1]) / 2
    run = resolve_config(compose_cfg([f"experiment={experiment}", *(f"{k}={v}" for k, v in values.items())]))
    for key, value in values.items():
        node = run
        for part in key.lstrip("+").split("."):
            node = node[part]
        assert node == pytest.approx(value), key


# -- optimized_metric ---------------------------------------------------------------------------------
def test_a_misspelt_optimized_metric_is_refused_naming_the_metrics():
    with pytest.raises(ConfigError) as err:
        check_optimized_metric(compose_cfg(["optimized_metric=val/seq_accc"]))
    text = str(err.value)
    assert "optimized_metric 'val/seq_accc'" in text and "Did you mean 'val/seq_acc'?" in text
    from attnflow.tasks.seq2seq import Seq2SeqTask

    listed = text.split("it reports ", 1)[1]
    assert all(name in listed for name in Seq2SeqTask.metric_names(("val", "test"))
               if not name.endswith("/penalty"))  # (logged only with task.penalty_weight > 0)
    assert "penalty" not in listed
    with pytest.raises(ConfigError, match="test=false"):  # HAN on IMDB has no test split
        check_optimized_metric(compose_cfg(["experiment=han_imdb", "optimized_metric=test/acc"]))


def test_cli_misspelt_metric_stops_before_training(monkeypatch, capsys, tmp_path):
    run = tmp_path / "run"
    assert train_cli(monkeypatch, *FAST, "optimized_metric=val/seq_accc", f"hydra.run.dir={run}") == 2
    assert "Did you mean 'val/seq_acc'?" in capsys.readouterr().err
    assert not (run / "config.yaml").exists() and not (run / "checkpoints").exists()


def test_a_metric_the_config_switches_off_is_refused_before_any_work(tmp_path):
    """val/penalty is logged only with task.penalty_weight > 0: with 0 a run (or every such job of
    a sweep) trained, then failed for want of it; a monitor on it is refused the same way."""
    with pytest.raises(ConfigError, match=r"optimized_metric 'val/penalty' .* \(with "
                                          r"task.penalty_weight=0: it is logged where "
                                          r"task.penalty_weight > 0\)"):
        check_optimized_metric(compose_cfg(["optimized_metric=val/penalty"]))
    assert check_optimized_metric(compose_cfg(["optimized_metric=val/penalty",
                                               "task.penalty_weight=0.1"])) == "val/penalty"
    from attnflow.training.validate import resolve_config

    with pytest.raises(ConfigError, match="val/penalty"):
        resolve_config(compose_cfg(["experiment=self_attentive_imdb", "callbacks.checkpoint.monitor=val/penalty",
                                    "task.penalty_weight=0"]))
    resolve_config(compose_cfg(["experiment=self_attentive_imdb", "callbacks.checkpoint.monitor=val/penalty",
                                "task.penalty_weight=0.3"]))


def test_cli_metric_the_run_did_not_report_fails_after_it(monkeypatch, capsys, tmp_path):
    """A metric the config check expects that the run did not log (e.g. captioning's grounding,
    which needs region boxes in the data): the run's own metrics are named."""
    import attnflow.config.sweeps as sweeps

    names = sweeps.final_metric_names
    monkeypatch.setattr(sweeps, "final_metric_names", lambda cfg: [*names(cfg), "val/unlogged"])
    run = tmp_path / "run"
    tiny = [a for a in TINY if a != "trainer.max_epochs=1"]  # (fast_dev_run sets the limits itself)
    assert train_cli(monkeypatch, *tiny, "callbacks.progress_bar=none", "trainer.fast_dev_run=true",
                     "optimized_metric=val/unlogged", f"hydra.run.dir={run}") == 2
    summary = json.loads((run / "metrics.json").read_text())
    err = capsys.readouterr().err
    assert "optimized_metric 'val/unlogged' was not reported" in err
    assert all(name in err for name in summary["metrics"])
    # the run records its failure (exit 2 after metrics.json), and attnflow-report does not say ok
    assert summary["failed"].startswith("optimized_metric 'val/unlogged' was not reported")
    from attnflow.cli.report import read_run

    assert read_run(run, "run").status.startswith("failed: optimized_metric 'val/unlogged'")


@pytest.mark.parametrize("overrides, why", [
    (["optimized_metric=test/loss", "trainer.limit_test_batches=0"],
     "(trainer.limit_test_batches=0: the final test pass reads no batch); it reports val/loss"),
    (["optimized_metric=val/seq_acc", "trainer.limit_val_batches=0.0", "test=false"],
     "(trainer.limit_val_batches=0.0: the final val pass reads no batch); it reports nothing"),
])
def test_a_split_the_run_evaluates_on_no_batch_reports_no_metric_refused_before_any_work(
        monkeypatch, capsys, tmp_path, overrides, why):
    """trainer.limit_test_batches=0 (or limit_val_batches=0) makes the final test (validation)
    return no metric: a run optimising one of them trained, wrote metrics.json, then exited 2 —
    and attnflow-report listed it as ok. Refused before any work."""
    with pytest.raises(ConfigError) as err:
        check_optimized_metric(compose_cfg(overrides))
    assert why in str(err.value)
    run = tmp_path / "run"
    assert train_cli(monkeypatch, *TINY, "callbacks.progress_bar=none", *overrides,
                     f"hydra.run.dir={run}") == 2
    assert why in capsys.readouterr().err
    assert not run.exists()  # refused before any work: not even Hydra's folder is left
    assert check_optimized_metric(compose_cfg(["optimized_metric=val/loss",
                                               "trainer.limit_test_batches=0"])) == "val/loss"


# -- the search space, checked before the first job -----------------------------------------------------
@pytest.mark.parametrize("argv, says", [
    (["-m", "model.dropout=0.1,0.5,1.5"], "the sweep's model.dropout=1.5 is refused, so no job was "
                                          "started: model 'seq2seq': field 'dropout' (at 'model.dropout') "
                                          "must be in [0, 1), got 1.5"),
    (["-m", "task.optim.lr=range(-2,1)"], "the sweep's task.optim.lr=-2 is refused"),  # a range: its ends
    (["hparams_search=gat_cora_optuna", "++model.attn_dropout=interval(0.2, 1.0)"],  # an interval: both
     "the sweep's model.attn_dropout=1.0 is refused"),
    # what the job would refuse before its data, checked for every value before the first job
    (["-m", "optimized_metric=val/loss,val/accc"], "the sweep's optimized_metric=val/accc is refused"),
    (["-m", "task.penalty_weight=0.3,0", "optimized_metric=val/penalty"],
     "the sweep's task.penalty_weight=0 is refused, so no job was started: optimized_metric 'val/penalty'"),
    (["-m", "trainer.accelerator=cpu,gpu"], "the sweep's trainer.accelerator=gpu is refused, so no job "
                                            "was started: trainer: "),  # Lightning's message
    (["-m", "logger=wandb", "logger.wandb.project=ok,a/b"], "the sweep's logger.wandb.project=a/b is refused"),
    (["hparams_search=gat_cora_optuna", "optimized_metric=val/loss"],
     "optimized_metric=val/loss is better lower (task 'node_classification'), but "
     "hydra.sweeper.direction=maximize would seek the worst runs: set hydra.sweeper.direction=minimize"),
    # the Optuna sweeper's own default direction (an enum, not a typed string): a traceback, and unchecked
    (["-m", "hydra/sweeper=optuna", "model.dropout=interval(0.1,0.5)", "optimized_metric=val/seq_acc"],
     "optimized_metric=val/seq_acc is better higher (task 'seq2seq'), but hydra.sweeper.direction="
     "minimize (the sweeper's default: none was set) would seek the worst runs: set "
     "hydra.sweeper.direction=maximize"),
    # nothing for the study to rank: every trial trained, then "No trials are completed yet"
    (["-m", "hydra/sweeper=optuna", "model.dropout=interval(0.1,0.5)"],
     "an Optuna sweep needs optimized_metric, the metric each job returns to the study (none is set: "
     "every trial would train, then the sweep would stop with no trial completed); set "
     "optimized_metric=val/seq_acc (task 'seq2seq''s checkpoint metric) with hydra.sweeper.direction=maximize"),
    # a sweep over a hydra.* key: an AssertionError traceback from the check of the jobs
    (["-m", "hydra/sweeper=optuna", "hydra.sweeper.direction=maximize", "optimized_metric=val/seq_acc",
      "+hydra.sweeper.params.model.dropout=interval(0.1,0.5)"],
     "+hydra.sweeper.params.model.dropout=interval(0.1,0.5): a sweep over Hydra's own settings "
     "(hydra.*), which Hydra does not support; give the search space as overrides of the run "
     "(model.dropout=interval(0.1,0.5)) on the command line"),
    # refused for every job: not "the sweep's scorer=dot is refused", which blamed the first value
    (["-m", "scorer=dot,additive", "optimized_metric=val/seqacc"],
     "config error: optimized_metric 'val/seqacc' (at 'optimized_metric') is not a metric that task "
     "'seq2seq' reports at the end of a run"),
    # a sweeper's field misspelt: Hydra's five lines, exit 1
    (["-m", "hydra/sweeper=optuna", "optimized_metric=val/seq_acc", "hydra.sweeper.direction=maximize",
      "model.dropout=interval(0.1,0.5)", "hydra.sweeper.n_trial=2"],
     "config error: hydra.sweeper.n_trial: sweeper OptunaSweeperConf has no field 'n_trial'; its fields: "
     "sampler, direction, storage, study_name, n_trials, n_jobs, max_failure_rate, search_space, params, "
     "custom_search_space. Did you mean 'n_trials'?"),
    (["-m", "seed=1,2", "trainer=ddp", "trainer.accelerator=cpu", "trainer.devices=2"],
     "a multirun (-m) with trainer.strategy=ddp on 2 device(s)"),
    # a group option missing from conf/: Hydra would say so only after making the sweep folder
    (["-m", "scorer=dot,dott"], "scorer has no option 'dott' (at 'scorer=dot,dott'); options: additive"),
    # what Hydra, Optuna or W&B would refuse with a traceback, or merge
    (["-m", "model.dropout=interval(0.1,0.5)"], "interval() is a range for a search"),
    (["hparams_search=gat_cora_optuna", "hydra.sweeper.n_trials=0"], "hydra.sweeper.n_trials must be an int >= 1"),
    (["hparams_search=gat_cora_optuna", "hydra.sweeper.direction=maximise"],
     "hydra.sweeper.direction must be minimize or maximize"),
    (["-m", "seed=1,2", "logger=wandb", "logger.wandb.run_id=one"], "logger.wandb.run_id=one names one W&B "
                                                                    "run for every job of the sweep"),
    (["-m", "seed=1,2", "logger=[csv,wandb]", "logger.wandb.run_name=mine"],
     "logger.wandb.run_name=mine gives every job of the sweep the one W&B run name"),
    (["-m", "seed=1,2", "logger=wandb", "run.name=mine"], "run.name=mine gives every job of the sweep the "
                                                          "one W&B run name"),
    # a swept field the job's config leaves unread (each job would train the same model)
    (["-m", "task.optim.warmup_steps=100,200"], "task.optim.warmup_steps=100 is read by none of the "
                                               "sweep's jobs, so no job was started: task.optim."
                                               "warmup_steps=100 (at 'task.optim.warmup_steps') does "
                                               "nothing"),
    (["-m", "model.encoder.layers=1", "model.encoder.dropout=0.1,0.3"],
     "model.encoder.dropout=0.1 is read by none of the sweep's jobs"),
    # a multirun of one job is checked as a sweep (its job does not check unread fields itself)
    (["-m", "experiment=gat_synthetic", "task.optim.warmup_steps=100"],
     "task.optim.warmup_steps=100 is read by none of the sweep's jobs"),
    (["-m", "attention=multihead", "attention.heads=7"],
     "the sweep's one job is refused, so no job was started: attention 'multihead': the query size 128"),
    # a shared group that no job uses
    (["-m", "experiment=han_imdb", "pooling=mean,max", "scorer=general"],
     "scorer=general is read by none of the sweep's jobs, so no job was started: scorer=general (at "
     "'scorer') does nothing: model 'han' does not use the shared group 'scorer'"),
    (["-m", "model.dropout=0.1,0.2", "task.optim.lr=0.1,0.2", "model.decoder.hidden_dim=0"],
     "the sweep's first job (model.dropout=0.1 task.optim.lr=0.1) is refused, so no job was started: "
     "decoder 'rnn_attention': field 'hidden_dim'"),  # a plain override every job shares: not one value's fault
])
def test_a_sweep_value_the_run_refuses_stops_the_sweep_before_any_job(monkeypatch, capsys, tmp_path,
                                                                      argv, says):
    """Each value of a sweep is checked as the run checks its config (one key varied at a time,
    both ends of a range or interval, and in a small grid every job) before Hydra starts: the
    sweep folder is never made."""
    import torch

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)  # a machine without a GPU
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    sweep = tmp_path / "sweep"
    assert train_cli(monkeypatch, *argv, f"hydra.sweep.dir={sweep}") == 2
    assert says in capsys.readouterr().err
    assert not sweep.exists()


def test_wandbs_name_variable_in_a_sweep_of_several_jobs_is_refused(monkeypatch, capsys, tmp_path):
    """$WANDB_NAME names a W&B run where no field does: in a sweep every job would get it."""
    monkeypatch.setenv("WANDB_NAME", "mine")
    sweep = tmp_path / "sweep"
    assert train_cli(monkeypatch, "-m", "seed=1,2", "logger=wandb", f"hydra.sweep.dir={sweep}") == 2
    assert ("$WANDB_NAME=mine gives every job of the sweep the one W&B run name, so W&B's runs table "
            "could not tell them apart; unset it") in capsys.readouterr().err
    assert not sweep.exists()


@pytest.mark.parametrize("argv, held, says", [
    (["-m", "scorer=dot,general"], ["multirun.yaml"], "already holds a sweep (multirun.yaml), which this "
                                                      "sweep's jobs would overwrite"),
    (["-m", "scorer=dot,general"], ["0/config.yaml", "0/metrics.json"],
     "already holds the runs of a sweep (1 job folder(s) with config.yaml: 0)"),
    # another study (or none) in an Optuna folder would number its jobs from 0 again
    (["hparams_search=gat_cora_optuna", "hydra.sweeper.study_name=other"], ["0/config.yaml"],
     "already holds the runs of a sweep"),
    (["-m", "seed=1,2", "hydra.sweep.subdir=fixed"], [], "hydra.sweep.subdir=fixed names one folder "
                                                          "for every job of the sweep"),
])
def test_a_sweep_that_would_overwrite_runs_is_refused_before_any_job(monkeypatch, capsys, tmp_path,
                                                                     argv, held, says):
    sweep = tmp_path / "sweep"
    for name in held:
        (sweep / name).parent.mkdir(parents=True, exist_ok=True)
        (sweep / name).write_text("earlier\n")
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    assert train_cli(monkeypatch, *argv, *TINY, f"hydra.sweep.dir={sweep}") == 2
    assert says in capsys.readouterr().err
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before
    assert all((sweep / name).read_text() == "earlier\n" for name in held)


def test_a_stored_study_is_continued_only_in_its_own_direction(monkeypatch, capsys, tmp_path):
    import optuna

    sweep = tmp_path / "study"
    sweep.mkdir()
    optuna.create_study(study_name="gat_cora_optuna", storage=f"sqlite:///{sweep}/optuna.db",
                        direction="minimize")
    before = (sweep / "optuna.db").read_bytes()
    assert train_cli(monkeypatch, "hparams_search=gat_cora_optuna", *TINY_GRAPH, f"hydra.sweep.dir={sweep}") == 2
    err = capsys.readouterr().err
    assert ("hydra.sweeper.direction=maximize differs from the study 'gat_cora_optuna' stored in "
            f"sqlite:///{sweep}/optuna.db, which minimizes") in err
    assert sorted(p.name for p in sweep.iterdir()) == ["optuna.db"] and (sweep / "optuna.db").read_bytes() == before


def test_a_stored_study_is_continued_only_by_its_own_command(monkeypatch, capsys, tmp_path):
    """A study ranks its trials against each other: continuing it with another experiment (or any
    other fixed override) mixed both in one ranking; the searched keys and hydra.* may differ."""
    import optuna
    import yaml
    from omegaconf import OmegaConf

    from attnflow.config.sweeps import _other_study_command

    sweep = tmp_path / "study"
    (sweep / "0" / ".hydra").mkdir(parents=True)
    optuna.create_study(study_name="gat_cora_optuna", storage=f"sqlite:///{sweep}/optuna.db",
                        direction="maximize")
    first = ["++task.optim.lr=0.002", "hparams_search=gat_cora_optuna",  # its job 0, as Hydra
             *(o.replace("=false", "=False") for o in TINY_GRAPH)]  # records it (False: the same)
    (sweep / "0" / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(first))
    before = (sweep / "optuna.db").read_bytes()
    assert train_cli(monkeypatch, "hparams_search=gat_cora_optuna", *TINY_GRAPH, "data.num_nodes=90",
                     f"hydra.sweep.dir={sweep}") == 2
    err = capsys.readouterr().err
    assert f"hydra.sweep.dir={sweep} holds the Optuna study 'gat_cora_optuna' of another command" in err
    assert "data.num_nodes=120" in err and "data.num_nodes=90" in err and "(no job was started)" in err
    assert (sweep / "optuna.db").read_bytes() == before and sorted(p.name for p in sweep.iterdir()) == [
        "0", "optuna.db"]
    hydra = OmegaConf.create({"sweeper": {"_target_": "x.OptunaSweeper", "study_name": "gat_cora_optuna",
                                          "storage": f"sqlite:///{sweep}/optuna.db"},
                              "sweep": {"dir": str(sweep)}})
    same = ["hparams_search=gat_cora_optuna", *TINY_GRAPH, "hydra.sweeper.n_trials=40"]
    assert _other_study_command(hydra, same, {"++task.optim.lr": [0.001]}) is None
    assert "experiment=gat_cora" in _other_study_command(hydra, [*same[:1], "experiment=gat_cora",
                                                                  *same[2:]], {"++task.optim.lr": [0.001]})


# -- real sweeps ---------------------------------------------------------------------------------------
def test_grid_multirun_through_the_console_script(tmp_path):
    """hparams_search=reverse_grid with 2 scorers × 2 learning rates (one of which diverges) through
    ``attnflow-train -m``, its output piped: each job's config has its pair of values; the progress
    lines come while it runs; each finished job prints its metrics table."""
    sweep = tmp_path / "grid"
    lrs = ["0.01", "1e30"]  # 1e30: a non-finite loss at once; the sweep goes on without that job
    cmd = [TRAIN, "-m", "hparams_search=reverse_grid", "scorer=dot,general", f"task.optim.lr={','.join(lrs)}",
           *TINY, "trainer.gradient_clip_val=null", "trainer.log_every_n_steps=1",
           "callbacks.progress_bar=auto", f"hydra.sweep.dir={sweep}"]
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    lines, running_at_first_line = [], None
    for line in proc.stdout:
        lines.append(line.rstrip("\n"))
        if running_at_first_line is None and re.match(r"epoch 1/1 step 1/2 \(50%\)", line):
            running_at_first_line = proc.poll() is None
    out = "\n".join(lines)
    assert proc.wait(timeout=300) == 0, out[-3000:]
    assert running_at_first_line, out[-3000:]  # a text line as it happens, not at the end

    jobs = _job_configs(sweep)
    assert sorted(jobs) == [0, 1, 2, 3] and (sweep / "multirun.yaml").is_file()
    pairs = {(c["scorer"]["name"], c["task"]["optim"]["lr"]) for c in jobs.values()}
    assert pairs == set(itertools.product(["dot", "general"], [float(x) for x in lrs]))
    finished = [n for n, c in jobs.items() if c["task"]["optim"]["lr"] == 0.01]
    for n, c in jobs.items():
        assert (sweep / str(n) / "metrics.json").is_file() == (n in finished)
        assert c["optimized_metric"] == "val/seq_acc"
    assert len(re.findall(r"^epoch 1/1 done in \d+:\d\d: .*val/loss=", out, re.M)) == len(finished)
    # the final table of each finished job, its numbers those of metrics.json
    tables = re.findall(r"final metrics.*?\n((?:.*\n)*?)└", out + "\n")
    assert len(tables) == len(finished)
    for n, table in zip(sorted(finished), tables):
        metrics = json.loads((sweep / str(n) / "metrics.json").read_text())["metrics"]
        row = next(r for r in table.splitlines() if re.match(r"│ loss\b", r))
        assert [c.strip() for c in row.split("│")[2:4]] == [f"{metrics['val/loss']:.4g}",
                                                            f"{metrics['test/loss']:.4g}"]


def test_optuna_study_runs_and_continues_from_its_storage(monkeypatch, tmp_path):
    """gat_cora_optuna on a generated graph: 2 trials, then the same command with n_trials=4 runs 2
    more into the same study (jobs 2 and 3; jobs 0 and 1 untouched); each job's config holds its
    trial's parameters and returned the metric Optuna stored."""
    import optuna

    sweep = tmp_path / "study"
    args = ["hparams_search=gat_cora_optuna", *TINY_GRAPH, f"hydra.sweep.dir={sweep}"]
    assert train_cli(monkeypatch, *args, "hydra.sweeper.n_trials=2") == 0
    first = {p: p.read_bytes() for p in sweep.glob("[01]/**/*") if p.is_file()}
    assert sorted(_job_configs(sweep)) == [0, 1] and (sweep / "optuna.db").is_file()

    assert train_cli(monkeypatch, *args, "hydra.sweeper.n_trials=4") == 0
    study = optuna.load_study(study_name="gat_cora_optuna", storage=f"sqlite:///{sweep}/optuna.db")
    trials = study.trials
    assert [t.number for t in trials] == [0, 1, 2, 3]
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in trials)
    assert {p: p.read_bytes() for p in first} == first  # the first jobs' files as they were
    jobs = _job_configs(sweep)
    assert sorted(jobs) == [0, 1, 2, 3]
    for t in trials:  # job number = trial number
        cfg, metrics = jobs[t.number], json.loads((sweep / str(t.number) / "metrics.json").read_text())
        assert t.params["++task.optim.lr"] == pytest.approx(cfg["task"]["optim"]["lr"])
        assert t.params["++task.optim.weight_decay"] == pytest.approx(cfg["task"]["optim"]["weight_decay"])
        assert t.params["++model.dropout"] == pytest.approx(cfg["model"]["dropout"])
        assert t.params["++model.attn_dropout"] == pytest.approx(cfg["model"]["attn_dropout"])
        assert t.value == pytest.approx(metrics["metrics"]["val/acc"])
    lrs = [t.params["++task.optim.lr"] for t in trials]
    assert len(set(lrs)) == 4  # the continued study proposes new points, not its first ones again
    results = OmegaConf.load(sweep / "optimization_results.yaml")
    assert results.best_value == pytest.approx(max(t.value for t in trials))


# -- launchers -----------------------------------------------------------------------------------------
def test_local_parallel_launcher_is_joblib_with_n_jobs():
    cfg = compose_cfg(["hydra/launcher=local_parallel", "hydra.launcher.n_jobs=3"], return_hydra_config=True)
    assert cfg.hydra.launcher._target_.endswith("JoblibLauncher") and cfg.hydra.launcher.n_jobs == 3


def test_slurm_launcher_writes_the_sbatch_script(tmp_path, monkeypatch, capfd):
    """The real submitit launcher up to ``sbatch``: a stand-in ``sbatch`` on PATH keeps the script
    it is given and fails (there is no cluster here), so the test reads what a cluster would run.
    attnflow-train runs in this process (submitit starts ``sbatch`` itself)."""
    bin_dir, kept = tmp_path / "bin", tmp_path / "job.sbatch"
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text(f'#!/bin/sh\ncp "$1" "{kept}"\necho "sbatch: error: no cluster" >&2\nexit 1\n')
    (bin_dir / "srun").write_text("#!/bin/sh\nexit 1\n")  # submitit checks that srun exists
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    sweep = tmp_path / "sweep"
    monkeypatch.setenv("HYDRA_FULL_ERROR", "0")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.chdir(tmp_path)
    code = train_cli(monkeypatch, "-m", "hydra/launcher=slurm", "scorer=dot,general",
                     "hydra.launcher.partition=debug", "hydra.launcher.nodes=2",
                     "hydra.launcher.tasks_per_node=4", "trainer=ddp", "trainer.num_nodes=2",
                     "trainer.devices=4", f"hydra.sweep.dir={sweep}")
    err = capfd.readouterr().err
    assert code != 0 and "sbatch: error: no cluster" in err, err[-2000:]
    script = kept.read_text()
    conf = OmegaConf.load(CONF / "hydra" / "launcher" / "slurm.yaml")
    expected = {"partition": "debug", "nodes": "2", "ntasks-per-node": "4", "array": "0-1%2",
                "gpus-per-node": str(conf.gpus_per_node), "cpus-per-task": str(conf.cpus_per_task),
                "mem": f"{conf.mem_gb}GB", "time": str(conf.timeout_min), "job-name": conf.name,
                "signal": f"USR2@{conf.signal_delay_s}"}
    found = dict(re.findall(r"^#SBATCH --([\w-]+)=(\S+)", script, re.M))
    assert {k: found.get(k) for k in expected} == expected
    assert f"export OMP_NUM_THREADS={conf.cpus_per_task}" in script  # the setup lines
    assert re.search(rf"^srun .* -u -m submitit\.core\._submit {re.escape(str(sweep))}/\.submitit/%j$", script, re.M)
    # one pickled job per sweep point: the launcher called with that job's overrides and number
    import pickle

    calls = [pickle.loads(p.read_bytes()) for p in (sweep / ".submitit").glob("*.pkl")]
    jobs = sorted((c.args[2], [o for o in c.args[0] if o.startswith("scorer=")]) for c in calls)
    assert jobs == [(0, ["scorer=dot"]), (1, ["scorer=general"])]


# -- a sweep whose plugin is not installed -------------------------------------------------------------
def test_required_plugins_follow_the_configs():
    assert list(required_plugins(["-m", "hparams_search=gat_cora_optuna"], CONF)) == [
        ("optuna", "hparams_search=gat_cora_optuna")]
    assert [p for p, _ in required_plugins(["hydra/launcher=slurm", "hydra/launcher=local_parallel",
                                            "hydra/sweeper=optuna"], CONF)] == ["submitit", "joblib", "optuna"]
    assert list(required_plugins(["hparams_search=reverse_grid", "scorer=dot"], CONF)) == []
    assert missing_plugin(["hparams_search=han_imdb_optuna"], CONF) is None  # installed here ([dev])


@pytest.mark.parametrize("argv, hidden, extra", [
    (["-m", "hparams_search=gat_cora_optuna"], ("optuna", "hydra_plugins.hydra_optuna_sweeper"), "sweep"),
    (["-m", "hydra/launcher=slurm", "scorer=dot,general"], ("submitit", "hydra_plugins.hydra_submitit_launcher"),
     "launchers"),
])
def test_without_the_extra_one_line_says_what_to_install(argv, hidden, extra, tmp_path):
    code = textwrap.dedent(f"""
        import sys
        class Hide:  # these packages are not installed, as far as this process can tell
            def find_spec(self, name, path=None, target=None):
                if any(name == h or name.startswith(h + ".") for h in {hidden!r}):
                    raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        sys.meta_path.insert(0, Hide())
        sys.argv = ["attnflow-train", *{argv!r}]
        from attnflow.cli.train import main
        main()
    """)
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=_env(), capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert f'pip install -e ".[{extra}]"' in lines[0] and f"no module '{hidden[0]}'" in lines[0]
    assert not list(tmp_path.iterdir())  # nothing was started


def test_an_experiment_file_that_sets_multirun_is_checked_as_a_sweep(tmp_path):
    """``attnflow-train experiment=<file with hydra.mode: MULTIRUN>`` sweeps without ``-m``: its
    values are checked too; a plain experiment is no sweep (None)."""
    conf = tmp_path / "conf"
    shutil.copytree(CONF, conf)
    (conf / "experiment" / "my_sweep.yaml").write_text(
        "# @package _global_\nhydra:\n  mode: MULTIRUN\n  sweeper:\n    params:\n"
        "      ++model.dropout: 0.1,1.5\n")
    says = check_sweep_values(["experiment=my_sweep"], conf)
    assert says and says.startswith("the sweep's model.dropout=1.5 is refused, so no job was started")
    assert check_sweep_values(["experiment=mt_transformer", "model.dropout=1.5"], conf) is None


def test_a_small_grid_is_checked_job_by_job_and_a_large_one_pair_by_pair(caplog):
    """The jobs the pre-check composes (sweeps._trials): the first job, each other value with the
    rest at their first (so a value refused alone is named alone), then in a grid of at most
    COMBINATIONS_CHECKED jobs the remaining ones, each once; in a larger grid, jobs holding every
    pair of two keys' values, up to JOBS_CHECKED jobs in all."""
    from attnflow.config.sweeps import COMBINATIONS_CHECKED, JOBS_CHECKED, _trials

    trials = _trials({"a": ["1", "2"], "b": ["x", "y", "z"]})
    assert trials[:4] == [(None, {"a": "1", "b": "x"}), ("a", {"a": "2", "b": "x"}),
                          ("b", {"a": "1", "b": "y"}), ("b", {"a": "1", "b": "z"})]
    jobs = [tuple(job.values()) for _, job in trials]
    assert sorted(jobs) == sorted((a, b) for a in "12" for b in "xyz")  # all six, none twice
    assert all(key is None for key, _ in trials[4:])
    assert _trials({"a": ["1", "2", "3"]}) == [("a", {"a": "1"}), ("a", {"a": "2"}), ("a", {"a": "3"})]

    def pairs_held(space, trials):  # every (key, value, other key, value) some job holds
        return {(a, job[a], b, job[b]) for _, job in trials for a, b in itertools.combinations(space, 2)}

    for space in ({"a": list("123"), "b": list("wxyz"), "c": list("pqrst")},  # 60 jobs
                  {k: list("123") for k in "abcde"}):                        # 243 jobs
        trials = _trials(space)
        assert math.prod(map(len, space.values())) > COMBINATIONS_CHECKED
        assert trials[0] == (None, {k: v[0] for k, v in space.items()})
        one_key = 1 + sum(len(v) - 1 for v in space.values())
        assert [key for key, _ in trials[1:one_key]] == [k for k, v in space.items() for _ in v[1:]]
        every_pair = {(a, x, b, y) for a, b in itertools.combinations(space, 2)
                      for x in space[a] for y in space[b]}
        assert pairs_held(space, trials) == every_pair
        assert len(trials) <= JOBS_CHECKED and len({tuple(j.values()) for _, j in trials}) == len(trials)
    assert len(_trials({k: list("123") for k in "abcde"})) < 243 // 10  # far fewer than the grid

    n = 10  # 100 pairs of two keys' values need 100 jobs: only JOBS_CHECKED are composed, with a warning
    space = {"a": [str(i) for i in range(n)], "b": [str(i) for i in range(n)]}
    with caplog.at_level(logging.WARNING, logger="attnflow.config.sweeps"):
        big = _trials(space)
    assert len(big) == JOBS_CHECKED < n * n
    assert len(pairs_held(space, big)) == JOBS_CHECKED
    assert f"{n * n - JOBS_CHECKED} more would be needed" in caplog.text
