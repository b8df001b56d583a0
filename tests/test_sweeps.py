"""Sweeps: the hparams_search group (a grid with Hydra's basic sweeper; the Optuna searches
compose), the metric a job returns, the launchers' configs, and the message when a sweep's plugin
is not installed. Optuna studies run in test_sweep_optuna.py."""

from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

from attnflow.config.registry import ConfigError, MODELS, DATA
from attnflow.training.validate import resolve_config
from attnflow.sweep.plugins import missing_plugin, required_plugins
from attnflow.sweep.checks import check_optimized_metric, final_metric_names
from support import CONF, FAST, compose_cfg, train_cli

TRAIN = str(Path(sys.executable).with_name("attnflow-train"))
# the default experiment, a few steps: 2 training batches, 1 validation and 1 test batch
TINY = ["data.train_size=64", "data.val_size=16", "data.test_size=16", "data.batch_size=32",
        "trainer.accelerator=cpu", "trainer.max_epochs=1", "trainer.enable_model_summary=false",
        "trainer.num_sanity_val_steps=0", "callbacks.attention_maps=null", "logger=csv"]


def _env():
    return dict(os.environ, OMP_NUM_THREADS="1", HYDRA_FULL_ERROR="0")


def _job_configs(sweep: Path):
    """{job number: resolved config} of a sweep folder's job subfolders."""
    return {int(p.parent.name): yaml.safe_load(p.read_text())
            for p in sweep.glob("[0-9]*/config.yaml")}


# -- the search configs --------------------------------------------------------------------------------
def _sweeper(name, *overrides):
    return compose_cfg([f"hparams_search={name}", *overrides], return_hydra_config=True)


@pytest.mark.slow
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
    assert len(str(params["task.optim.lr"]).split(",")) == 2
    assert cfg.optimized_metric in final_metric_names(cfg)


@pytest.mark.parametrize("name, experiment, dataset_field", [
    ("gat_cora_optuna", "gat_cora", ("dataset", "Cora")),
    ("han_imdb_optuna", "han_imdb", ("limit_train", 5000)),
])
@pytest.mark.slow
def test_optuna_searches_compose_and_every_key_is_a_field(name, experiment, dataset_field):
    cfg = _sweeper(name, "hydra.sweep.dir=/somewhere/sweep")
    sweeper = cfg.hydra.sweeper
    assert sweeper._target_.endswith("OptunaSweeper") and sweeper.sampler._target_.endswith("TPESampler")
    assert sweeper.storage is None  # the study in <sweep dir>/optuna.db
    assert sweeper.study_name == name and sweeper.direction is None  # val/acc: maximize
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
@pytest.mark.slow
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


@pytest.mark.slow
def test_cli_misspelt_metric_stops_before_training(monkeypatch, capsys, tmp_path):
    run = tmp_path / "run"
    assert train_cli(monkeypatch, *FAST, "optimized_metric=val/seq_accc", f"hydra.run.dir={run}") == 2
    assert "Did you mean 'val/seq_acc'?" in capsys.readouterr().err
    assert not (run / "config.yaml").exists() and not (run / "checkpoints").exists()


@pytest.mark.slow
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


@pytest.mark.slow
def test_cli_metric_the_run_did_not_report_fails_after_it(monkeypatch, capsys, tmp_path):
    """A metric the config check expects that the run did not log (e.g. captioning's grounding,
    which needs region boxes in the data): the run's own metrics are named."""
    import attnflow.sweep.checks as sweeps

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
    from attnflow.viz.runs import read_run

    assert read_run(run, "run").status.startswith("failed: optimized_metric 'val/unlogged'")


@pytest.mark.parametrize("overrides, why", [
    (["optimized_metric=test/loss", "trainer.limit_test_batches=0"],
     "(trainer.limit_test_batches=0: the final test pass reads no batch); it reports val/loss"),
    (["optimized_metric=val/seq_acc", "trainer.limit_val_batches=0.0", "test=false"],
     "(trainer.limit_val_batches=0.0: the final val pass reads no batch); it reports nothing"),
])
@pytest.mark.slow
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


@pytest.mark.slow
def test_a_misspelt_metric_stops_a_sweep_in_its_first_job_before_it_trains(monkeypatch, capsys, tmp_path):
    sweep = tmp_path / "sweep"
    assert train_cli(monkeypatch, "-m", "scorer=dot,additive", "optimized_metric=val/seqacc", *TINY,
                     f"hydra.sweep.dir={sweep}") == 2
    assert "optimized_metric 'val/seqacc' (at 'optimized_metric') is not a metric" in capsys.readouterr().err
    assert not list(sweep.glob("*/config.yaml")) and not (sweep / "1").exists()


# -- real sweeps ---------------------------------------------------------------------------------------
@pytest.mark.slow
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
        if running_at_first_line is None and re.match(r"epoch 0/0 step 1/2 \(50%\)", line):
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
    assert len(re.findall(r"^epoch 0/0 done in \d+:\d\d: .*val/loss=", out, re.M)) == len(finished)
    # the final table of each finished job, its numbers those of metrics.json
    tables = re.findall(r"final metrics.*?\n((?:.*\n)*?)└", out + "\n")
    assert len(tables) == len(finished)
    for n, table in zip(sorted(finished), tables):
        metrics = json.loads((sweep / str(n) / "metrics.json").read_text())["metrics"]
        row = next(r for r in table.splitlines() if re.match(r"│ loss\b", r))
        assert [c.strip() for c in row.split("│")[2:4]] == [f"{metrics['best/val/loss']:.4g}",
                                                            f"{metrics['test/loss']:.4g}"]


@pytest.mark.slow
def test_a_sweep_prints_and_records_each_jobs_overrides_as_typed(tmp_path):
    """Hydra's basic launcher prints each job's overrides as the sweeper splits them from the
    command line: as typed, without the ``++`` with which attnflow composes a field the YAML
    leaves at its default (``trainer.max_epochs``, ``data.train_size``); each job records them
    so (``.hydra/overrides.yaml``, the run's ``run.overrides``) and trains with their values."""
    sweep = tmp_path / "sweep"
    given = [*(o for o in TINY if not o.startswith(("trainer.max_epochs=", "trainer.enable_model_summary="))),
             "trainer.max_epochs=2", "trainer.limit_train_batches=1"]  # (a bool: the sweeper writes False)
    cmd = [TRAIN, "-m", "scorer=dot,additive", *given, f"hydra.sweep.dir={sweep}"]
    proc = subprocess.run(cmd, cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    printed = dict(re.findall(r"#(\d+) : (.*)$", out, re.M))
    typed = {str(n): [f"scorer={s}", *given] for n, s in enumerate(("dot", "additive"))}
    assert printed == {n: " ".join(o) for n, o in typed.items()}, out[-3000:]
    jobs = _job_configs(sweep)
    for n, overrides in typed.items():
        assert yaml.safe_load((sweep / n / ".hydra" / "overrides.yaml").read_text()) == overrides
        run = jobs[int(n)]["run"]
        assert run["overrides"] == [o for o in overrides if not o.startswith(("logger=", "callbacks.progress_bar"))]
        assert "++" not in run["name"] and run["name"].startswith(f"default scorer={overrides[0][7:]} ")
        assert jobs[int(n)]["trainer"]["max_epochs"] == 2 and jobs[int(n)]["data"]["train_size"] == 64
        assert json.loads((sweep / n / "metrics.json").read_text())["epochs"] == 2


# -- launchers -----------------------------------------------------------------------------------------
def test_local_parallel_launcher_is_joblib_with_n_jobs():
    cfg = compose_cfg(["hydra/launcher=local_parallel", "hydra.launcher.n_jobs=3"], return_hydra_config=True)
    assert cfg.hydra.launcher._target_.endswith("JoblibLauncher") and cfg.hydra.launcher.n_jobs == 3


@pytest.mark.slow
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
    (["-m", "hparams_search=gat_cora_optuna"], ("optuna",), "sweep"),
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
