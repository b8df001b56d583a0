"""A sweep's Optuna study for ``attnflow-report``: read from a copy of its storage (sqlite
``optuna.db`` or journal ``optuna.journal``) into memory, so that a running sweep is never
disturbed; its trial states give the runs' statuses (pruned, running or interrupted, failed and
retried) and its counts, best trial or Pareto-optimal trials the summary line.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from attnflow.io.metric_names import result_name
from attnflow.sweep.plugins import RETRY_OF, RUN_DIR
from attnflow.sweep.storage import open_storage
from attnflow.viz.runs import MISSING, PRUNED, Report, Run, natural, sort_key

INTERRUPTED = "running or interrupted"  # RUNNING in the study, no result in its run folder
STATE_WORDS = {"COMPLETE": "complete", "PRUNED": "pruned", "FAIL": "failed", "RUNNING": "running",
               "WAITING": "waiting"}


def is_optuna_sweep(report: Report) -> bool:
    """Whether the sweep names an Optuna sweeper or holds an Optuna storage file."""
    return "optuna" in str(report.sweeper.get("_target_", "")).lower() or any(
        (report.path / f).is_file() for f in ("optuna.db", "optuna.journal"))


def storage_file(path: Path, sweeper: Dict[str, Any]) -> Optional[Path]:
    """The study's storage file: the sweeper's ``storage`` (a ``.journal`` file or a
    ``sqlite:///`` URL), else ``optuna.db`` or ``optuna.journal`` in the sweep folder (the
    sweeper's default for ``storage: null``), else the folder's only ``*.db`` or ``*.journal``."""
    storage = sweeper.get("storage")
    if isinstance(storage, str) and "${" not in storage:
        given = Path(storage[len("sqlite:///"):] if storage.startswith("sqlite:///") else storage)
        for f in (given, path / given):
            if f.is_file():
                return f
    for f in (path / "optuna.db", path / "optuna.journal"):
        if f.is_file():
            return f
    found = sorted(path.glob("*.db")) + sorted(path.glob("*.journal"))
    return found[0] if len(found) == 1 else None


def _in_memory(optuna, study):
    """A copy of ``study`` in memory (trial numbers, states, values and attributes kept)."""
    copy = optuna.create_study(study_name=study.study_name, directions=study.directions)
    copy.add_trials(study.trials)
    if study.metric_names:
        copy.set_metric_names(study.metric_names)
    return copy


def load_study(path: Path, sweeper: Dict[str, Any]) -> Tuple[Any, Optional[str]]:
    """(the study, in memory, None) or (None, why not): the one study in the storage, else the
    one named ``hydra.sweeper.study_name``."""
    try:
        import optuna
    except ImportError:
        return None, "optuna is not installed (pip install -e \".[sweep]\"): no Optuna study to show"
    found = storage_file(path, sweeper)
    if found is None:
        return None, (f"no Optuna storage (optuna.db) in {path}, nor a journal (optuna.journal): "
                      "the study was kept in memory, so there is no optimisation history or "
                      "importances to show")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    with tempfile.TemporaryDirectory(prefix="attnflow-report-") as tmp:
        try:
            copy = Path(shutil.copy2(found, Path(tmp) / f"study{found.suffix}"))
            storage = open_storage(str(copy) if copy.suffix == ".journal" else f"sqlite:///{copy}")
            names = optuna.get_all_study_names(storage)
            name = names[0] if len(names) == 1 else sweeper.get("study_name")
            if name not in names:
                return None, (f"{found.name} holds studies {', '.join(names) or '(none)'}; "
                              f"multirun.yaml names none of them (hydra.sweeper.study_name)")
            return _in_memory(optuna, optuna.load_study(study_name=name, storage=storage)), None
        except Exception as err:  # a damaged or foreign file: a note, not a failed report
            return None, f"could not read the Optuna study in {found}: {err}"


def objective_names(report: Report) -> List[str]:
    """The names of the trials' values: the config's ``optimized_metric`` (one per direction),
    else the study's metric names, as results (``val/acc``: ``best/val/acc``), else
    ``objective 0``, ``objective 1``, ..."""
    study = report.study
    n = len(study.directions)
    given = next((r.config.get("optimized_metric") for r in report.runs
                  if r.config.get("optimized_metric")), None)
    given = given if isinstance(given, list) else [given] if given else []
    if len(given) == n:
        return [result_name(str(g)) for g in given]
    if study.metric_names and len(study.metric_names) == n:
        return [result_name(m) for m in study.metric_names]
    return [report.metric] if n == 1 and report.metric else [f"objective {i}" for i in range(n)]


def counts(study) -> Dict[str, int]:
    """{state word: number of trials}: complete, pruned and failed always, running and waiting
    where there are any."""
    n = {w: 0 for w in ("complete", "pruned", "failed")}
    for t in study.trials:
        word = STATE_WORDS.get(t.state.name, t.state.name.lower())
        n[word] = n.get(word, 0) + 1
    return n


def pareto_numbers(study) -> List[int]:
    """The Pareto-optimal trials' numbers (of a multi-objective study), ascending."""
    return sorted(t.number for t in study.best_trials)


def summary_line(report: Report) -> Optional[str]:
    """``Optuna study NAME: N trials (a complete, b pruned, c failed)``, then the best trial or
    the Pareto-optimal trials; None without a study."""
    study = report.study
    if study is None:
        return None
    n = counts(study)
    line = (f"Optuna study {study.study_name}: {len(study.trials)} trials ("
            + ", ".join(f"{v} {k}" for k, v in n.items()) + ")")
    names = objective_names(report)
    done = [t for t in study.trials if t.state.name == "COMPLETE"]
    if not done:
        return line + "; no completed trial yet"
    if len(names) > 1:
        return line + "; Pareto-optimal trials: " + ", ".join(map(str, pareto_numbers(study)))
    best = study.best_trial
    return line + f"; best: trial {best.number} ({names[0]} {best.value:.4g})"


def _status(trial, retried_by: Dict[int, int]) -> str:
    """A run's status from its trial's state where its folder holds no result."""
    state = trial.state.name
    if state == "FAIL":
        again = retried_by.get(trial.number)
        return "failed" + (f" (interrupted; re-run as trial {again})" if again is not None else "")
    return {"RUNNING": INTERRUPTED, "WAITING": "waiting"}.get(state, MISSING)


def _folder(trial, report: Report) -> Path:
    """The run folder of ``trial``: its ``run_dir`` (a resumed trial runs in the folder of the
    one it takes up), else ``<sweep dir>/<number>``."""
    return Path(trial.user_attrs.get(RUN_DIR) or report.path / str(trial.number))


def apply_statuses(report: Report) -> None:
    """The runs' statuses from their trials: a pruned trial whose metrics.json does not say so
    is ``pruned``; a trial without a result in its folder (or without a folder) gets its state's
    status; a folder a later trial resumed is that trial's; another worker's trials (their folders
    elsewhere) are counted in a note; runs are sorted again."""
    trials = report.study.trials
    retried_by = {t.user_attrs[RETRY_OF]: t.number for t in trials
                  if isinstance(t.user_attrs.get(RETRY_OF), int)}
    runs = {r.name: r for r in report.runs}
    added, elsewhere, here = [], 0, report.path.resolve()
    for t in trials:
        folder = _folder(t, report)
        if folder.parent.resolve() != here:
            elsewhere += 1
            continue
        if t.number in retried_by and _folder(trials[retried_by[t.number]], report) == folder:
            continue  # (its folder holds the run of the trial that resumed it)
        run = runs.get(folder.name)
        if run is None:
            run = Run(name=folder.name, path=folder, status=MISSING)
            runs[folder.name] = run
            added.append(run)
        if run.status == "ok" and t.state.name == "PRUNED" and "trial" not in run.summary:
            run.status = PRUNED
        elif run.status == MISSING:
            run.status = _status(t, retried_by)
            if run in added and run.status == MISSING:
                run.status = f"no run folder (trial {STATE_WORDS.get(t.state.name, t.state.name)})"
        if isinstance(t.user_attrs.get(RETRY_OF), int):
            how = "resumed" if folder == _folder(trials[t.user_attrs[RETRY_OF]], report) else "re-ran"
            report.notes.append(f"trial {t.number} {how} trial {t.user_attrs[RETRY_OF]}, "
                                "which was interrupted")
    if elsewhere:
        report.notes.append(f"{elsewhere} trial(s) of the study ran in other workers' folders "
                            f"(attnflow-report <their folder> lists them)")
    report.runs += sorted(added, key=lambda r: natural(r.name))
    if not report.groups:
        report.runs.sort(key=sort_key(report.metric, report.maximize))


def attach_study(report: Report) -> None:
    """Load an Optuna sweep's study into ``report.study`` and apply its trials' states to the
    runs; where it cannot be read, a note says why."""
    if report.kind != "sweep" or not is_optuna_sweep(report):
        return
    report.study, note = load_study(report.path, report.sweeper)
    if report.study is None:
        report.notes.append(note)
        return
    apply_statuses(report)
    names = objective_names(report)
    if len(names) > 1:
        report.notes.append(f"a multi-objective study ({', '.join(names)}): the table is sorted by "
                            f"the first, {names[0]}; the summary names the Pareto-optimal trials")
