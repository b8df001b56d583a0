"""attnflow-report on sweep folders as attnflow's Optuna sweeper leaves them: studies built here with
optuna's ask/tell API (pruned trials with intermediate values, a failed trial and its retry,
running trials) in sqlite and journal storages, and a 2-objective study. Expected statuses, counts,
best and Pareto-optimal trials are computed here from the trials as built, not read from optuna."""

from __future__ import annotations

import csv
import hashlib
import json
import random
import re
from pathlib import Path

import pytest
import yaml

from attnflow.cli.report import main

optuna = pytest.importorskip("optuna")
from optuna.distributions import FloatDistribution, IntDistribution  # noqa: E402
from optuna.trial import TrialState  # noqa: E402

SWEEPER = "hydra_plugins.attnflow_optuna_sweeper.optuna_sweeper.OptunaSweeper"
SPACE = {"task.optim.lr": FloatDistribution(1e-4, 1e-1, log=True), "model.heads": IntDistribution(1, 8)}
# single objective, val/acc maximised: (state, curve reported after each validation); a pruned
# trial's last value is its value; "retry" re-runs the failed trial 3, which was interrupted
TRIALS = [("complete", [0.5, 0.6, 0.7]), ("pruned", [0.3, 0.35]), ("complete", [0.6, 0.8, 0.85]),
          ("fail", [0.4]), ("pruned", [0.2]), ("retry", [0.5, 0.65, 0.72]), ("running", [0.4]),
          ("running", [])]
STATUS = {"complete": "ok", "retry": "ok", "pruned": "pruned", "running": "running or interrupted"}


def read_csv(path: Path):
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def _sweep_folder(folder: Path, storage, direction, metric) -> None:
    folder.mkdir()
    sweeper = {"_target_": SWEEPER, "study_name": "gat_cora_optuna", "storage": storage,
               "direction": direction}
    (folder / "multirun.yaml").write_text(yaml.safe_dump({"hydra": {"sweeper": sweeper},
                                                          "optimized_metric": metric}))


def _run_folder(folder: Path, trial, metric, metrics=None, state=None, pruned_at=None) -> None:
    """Trial ``trial``'s run folder; metrics.json only where ``metrics`` are given."""
    job = folder / str(trial.number)
    (job / ".hydra").mkdir(parents=True)
    (job / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(
        [f"{k}={v}" for k, v in trial.params.items()]))
    (job / "config.yaml").write_text(yaml.safe_dump({"optimized_metric": metric}))
    if metrics is None:
        return
    summary = {"metrics": metrics, "epochs": 3}
    if state is not None:
        summary["trial"] = {"number": trial.number, "state": state,
                            **({"pruned_at": pruned_at} if pruned_at else {})}
    (job / "metrics.json").write_text(json.dumps(summary))


def _single_objective_sweep(folder: Path, journal: bool = False) -> Path:
    """TRIALS as a sweep: the second pruned trial's metrics.json records no trial state, the
    first running trial has a folder without results, the second no folder at all."""
    if journal:
        from optuna.storages.journal import JournalFileBackend

        path = folder / "optuna.journal"
        _sweep_folder(folder, str(path), "maximize", "val/acc")
        storage = optuna.storages.JournalStorage(JournalFileBackend(str(path)))
    else:
        _sweep_folder(folder, None, "maximize", "val/acc")
        storage = f"sqlite:///{folder / 'optuna.db'}"
    study = optuna.create_study(study_name="gat_cora_optuna", storage=storage, direction="maximize",
                                sampler=optuna.samplers.RandomSampler(seed=0))
    for i, (kind, curve) in enumerate(TRIALS):
        t = study.ask(SPACE)
        for step, value in enumerate(curve, 1):
            t.report(value, step)
        if kind == "retry":
            t.set_user_attr("retry_of", 3)
        if kind in ("complete", "retry"):
            study.tell(t, curve[-1])
        elif kind in ("pruned", "fail"):
            study.tell(t, state=TrialState.PRUNED if kind == "pruned" else TrialState.FAIL)
        if kind == "running" and not curve:
            continue  # no folder yet
        result = None if kind in ("fail", "running") else {"val/acc": curve[-1]}
        state = {"complete": "complete", "retry": "complete", "pruned": "pruned"}.get(kind)
        state = None if i == 4 else state  # left to the study
        _run_folder(folder, t, "val/acc", result, state, len(curve) if kind == "pruned" else None)
    return folder


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _check_single_objective(folder: Path, out: Path, storage: Path) -> str:
    before = _digest(storage)
    main([str(folder), "-o", str(out)])
    assert _digest(storage) == before  # read from a copy
    rows = {r["run"]: r for r in read_csv(out / "report.csv")}
    assert set(rows) == {str(i) for i in range(len(TRIALS))}  # the trial without folder too
    for i, (kind, _) in enumerate(TRIALS):
        status = rows[str(i)]["status"]
        if kind == "fail":
            retry = next(j for j, (k, _) in enumerate(TRIALS) if k == "retry")
            assert status.startswith("failed") and f"re-run as trial {retry}" in status
        else:
            assert status == STATUS[kind], (i, status)
    order = [r["run"] for r in read_csv(out / "report.csv")]
    done = sorted((i for i, (k, _) in enumerate(TRIALS) if k in ("complete", "retry")),
                  key=lambda i: -TRIALS[i][1][-1])
    pruned = sorted((i for i, (k, _) in enumerate(TRIALS) if k == "pruned"), key=lambda i: -TRIALS[i][1][-1])
    assert order[:len(done) + len(pruned)] == [str(i) for i in done + pruned]  # best first, then pruned
    kinds = [k for k, _ in TRIALS]
    md = (out / "report.md").read_text()
    best = done[0]
    assert (f"Optuna study gat_cora_optuna: {len(TRIALS)} trials ({kinds.count('complete') + 1} complete, "
            f"{kinds.count('pruned')} pruned, {kinds.count('fail')} failed, {kinds.count('running')} "
            f"running); best: trial {best} (best/val/acc {TRIALS[best][1][-1]:.4g})") in md
    for name in ("optuna_history", "optuna_intermediate", "optuna_importances"):
        assert (out / f"{name}.png").is_file(), name
    return md


@pytest.mark.slow
def test_pruned_failed_retried_and_running_trials_of_a_sqlite_study(tmp_path):
    folder = _single_objective_sweep(tmp_path / "sweep")
    md = _check_single_objective(folder, tmp_path / "rep", folder / "optuna.db")
    assert "note: trial 5 re-ran trial 3, which was interrupted" in md
    html = (tmp_path / "rep" / "report.html").read_text()
    for title in ("Optuna: optimisation history", "Optuna: intermediate values",
                  "Optuna: parameter importances"):
        assert f"alt='{title}'" in html
    assert "<tr class='pruned' data-run='1'>" in html


@pytest.mark.slow
def test_a_journal_study_reports_as_the_sqlite_one(tmp_path):
    folder = _single_objective_sweep(tmp_path / "sweep", journal=True)
    assert not (folder / "optuna.db").exists()
    _check_single_objective(folder, tmp_path / "rep", folder / "optuna.journal")


@pytest.mark.slow
def test_intermediate_values_draw_every_curve_pruned_ones_dashed(tmp_path, monkeypatch):
    import attnflow.viz.study_plots as plots
    from attnflow.viz.runs import build
    from attnflow.viz.study import attach_study

    drawn = {}

    def keep(fig, out, name):
        drawn[name] = fig
        return out / name
    monkeypatch.setattr(plots, "save_png", keep)
    report = build(_single_objective_sweep(tmp_path / "sweep"))
    attach_study(report)
    plots.plot_intermediate(report, tmp_path)
    ax = drawn["optuna_intermediate"].axes[0]
    curves = [line for line in ax.get_lines() if line.get_linestyle() != "None"]
    reported = [c for _, c in TRIALS if c]
    assert sorted(tuple(line.get_ydata()) for line in curves) == sorted(tuple(c) for c in reported)
    dashed = sorted(tuple(line.get_ydata()) for line in curves if line.get_linestyle() == "--")
    assert dashed == sorted(tuple(c) for k, c in TRIALS if k == "pruned")
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert f"pruned ({[k for k, _ in TRIALS].count('pruned')})" in labels


def _dominates(a, b, signs) -> bool:
    """Whether values ``a`` are at least as good as ``b`` in every objective and better in one."""
    return all(s * x >= s * y for x, y, s in zip(a, b, signs)) and any(
        s * x > s * y for x, y, s in zip(a, b, signs))


@pytest.mark.slow
def test_a_two_objective_study_names_its_pareto_trials(tmp_path):
    """val/acc maximised, val/loss minimised; the storage a sqlite URL in multirun.yaml holding a
    second study, so that the sweeper's study_name picks it."""
    folder, rng = tmp_path / "sweep", random.Random(0)
    url = f"sqlite:///{folder / 'studies.db'}"
    _sweep_folder(folder, url, ["maximize", "minimize"], ["val/acc", "val/loss"])
    optuna.create_study(study_name="another", storage=url)
    study = optuna.create_study(study_name="gat_cora_optuna", storage=url, directions=["maximize", "minimize"],
                                sampler=optuna.samplers.RandomSampler(seed=0))
    values = {}
    for _ in range(12):
        t = study.ask(SPACE)
        values[t.number] = (round(rng.uniform(0.5, 0.9), 3), round(rng.uniform(0.2, 1.0), 3))
        study.tell(t, values[t.number])
        _run_folder(folder, t, ["val/acc", "val/loss"], dict(zip(["val/acc", "val/loss"], values[t.number])),
                    "complete")
    front = [n for n, v in values.items()
             if not any(_dominates(w, v, (1, -1)) for m, w in values.items() if m != n)]
    main([str(folder), "-o", str(tmp_path / "rep")])
    md = (tmp_path / "rep" / "report.md").read_text()
    named = re.search(r"Pareto-optimal trials: ([\d, ]+)", md).group(1)
    assert [int(n) for n in named.split(", ")] == sorted(front)
    assert "Optuna study gat_cora_optuna: 12 trials (12 complete, 0 pruned, 0 failed)" in md
    rows = read_csv(tmp_path / "rep" / "report.csv")
    assert [r["run"] for r in rows] == [str(n) for n in sorted(values, key=lambda n: -values[n][0])]
    for name in ("optuna_pareto", "optuna_importances_best_val_acc", "optuna_importances_best_val_loss"):
        assert (tmp_path / "rep" / f"{name}.png").is_file(), name
    assert not (tmp_path / "rep" / "optuna_history.png").exists()
