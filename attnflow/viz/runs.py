"""The runs ``attnflow-report`` reads: a run or sweep folder as a :class:`Report`, its runs sorted
best first by the metric chosen (:func:`build`), and its table (:func:`table`).
"""

from __future__ import annotations

import csv
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Type

import yaml

from attnflow.config.contracts import TaskContract
from attnflow.config.registry import TASKS, ConfigError
from attnflow.io.metric_names import current_names, curve_name, result_name
from attnflow.io.text import listed

RUN_MARKERS = ("config.yaml", "metrics.json", ".hydra")
MISSING = "no metrics.json (failed, killed or unfinished)"
NO_METRICS = "metrics.json holds no metrics"
NOT_A_RUN = "not a run: no config.yaml (nor .hydra/config.yaml) and no metrics"
PRUNED = "pruned"  # an Optuna trial stopped by the pruner: its metrics are those it reached
LOWER_IS_BETTER = ("loss", "wer", "ter", "error", "perplexity", "ppl")


class ReportError(ValueError):
    """A path that is not a run or sweep directory; the CLI prints it and exits 2."""


@dataclass
class Run:
    """One run directory: what it was run with and what it measured."""

    name: str
    path: Path
    status: str = "ok"
    config: Dict[str, Any] = field(default_factory=dict)
    overrides: Optional[Dict[str, Any]] = None  # None: no .hydra/overrides.yaml
    summary: Dict[str, Any] = field(default_factory=dict)
    metrics: Dict[str, float] = field(default_factory=dict)
    pictures: List[Path] = field(default_factory=list)


@dataclass
class Group:
    """The runs of one experiment among several, ranked by their own metric (column ``group``)."""

    name: str
    what: str  # "task seq2seq on reverse data"
    metric: str
    maximize: bool
    runs: List[str]


@dataclass
class Report:
    """Runs sorted best first, the sort metric with its direction, and the swept parameters."""

    path: Path
    kind: str  # "run", "sweep" (multirun.yaml) or "runs" (a folder of runs, e.g. outputs/<date>/)
    runs: List[Run]
    metric: str
    maximize: bool
    metric_source: str
    params: List[str]
    common: Dict[str, Any]
    sweeper: Dict[str, Any]
    notes: List[str] = field(default_factory=list)
    groups: List[Group] = field(default_factory=list)  # runs of several experiments: each ranked
    study: Any = None  # the sweep's Optuna study, an in-memory copy (attnflow.viz.study)

    def group(self, run: Run) -> Optional[Group]:
        return next((g for g in self.groups if run.name in g.runs), None)

    def value(self, run: Run, key: str) -> Any:
        """A run's value of a swept parameter (override, or flattened config key)."""
        source = run.overrides if run.overrides is not None else flatten(run.config)
        return source.get(key)


def _is_run(path: Path) -> bool:
    return path.is_dir() and any((path / m).exists() for m in RUN_MARKERS)


def _has_config(path: Path) -> bool:
    return (path / "config.yaml").is_file() or (path / ".hydra" / "config.yaml").is_file()


def natural(name: str) -> Tuple:
    return tuple(int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name))


def _parse_overrides(lines: Sequence[str]) -> Dict[str, Any]:
    """Hydra's overrides as {key: typed value}, by Hydra's own grammar (``~key``: None)."""
    from attnflow.config.overrides import parse  # (Hydra's grammar: not for attnflow-report --help)

    out: Dict[str, Any] = {}
    for line in lines:
        try:
            o = parse(str(line))
            value = o.value()
            out[o.key_or_group] = value if isinstance(value, (str, int, float, bool)) or value is None \
                else str(value)
        except Exception:  # a line Hydra would not have written
            key, _, value = str(line).lstrip("+~").partition("=")
            out[key] = value
    return out


def flatten(node: Any, prefix: str = "") -> Dict[str, Any]:
    if isinstance(node, dict):
        out: Dict[str, Any] = {}
        for k, v in node.items():
            out.update(flatten(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: str(node) if isinstance(node, list) else node}


def _load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text()) if path.is_file() else None


def _one_line(err: Any) -> str:
    """A problem as one line: a YAML error's problem and where, else the first line and "…"."""
    if isinstance(err, yaml.MarkedYAMLError) and err.problem and err.problem_mark is not None:
        mark = err.problem_mark
        return f"{err.problem} at line {mark.line + 1}, column {mark.column + 1}"
    lines = str(err).strip().splitlines() or [""]
    return lines[0] + (" …" if len(lines) > 1 else "")


def read_run(path: Path, name: str, pictures: int = 4) -> Run:
    """A :class:`Run` from its directory; problems become its ``status``, never an exception."""
    run = Run(name=name, path=path)
    problems, pruned = [], False
    try:
        config = _load_yaml(path / "config.yaml") or {}
        if not isinstance(config, dict):
            raise yaml.YAMLError(f"a {type(config).__name__}, not a mapping")
        run.config = config
    except (OSError, yaml.YAMLError) as err:
        problems.append(f"unreadable config.yaml ({_one_line(err)})")
    try:
        lines = _load_yaml(path / ".hydra" / "overrides.yaml")
        run.overrides = _parse_overrides(lines) if isinstance(lines, list) else None
    except (OSError, yaml.YAMLError) as err:
        problems.append(f"unreadable .hydra/overrides.yaml ({_one_line(err)})")
    if (path / "metrics.json").is_file():
        try:
            summary = json.loads((path / "metrics.json").read_text())
            if not isinstance(summary, dict):
                raise ValueError(f"a JSON {type(summary).__name__}, not an object")
            run.metrics = current_names({k: float(v) for k, v in (summary.get("metrics") or {}).items()})
            run.summary = summary
            if summary.get("failed"):
                problems.append(f"failed: {_one_line(summary['failed'])}")
            elif not run.metrics:
                problems.append(NO_METRICS)
            trial = summary.get("trial")
            pruned = isinstance(trial, dict) and trial.get("state") == PRUNED
        except (OSError, ValueError, TypeError, AttributeError) as err:
            problems.append(f"unreadable metrics.json ({_one_line(err)})")
    else:
        problems.append(MISSING)
    if not _has_config(path) and not run.metrics and not run.summary.get("failed"):
        problems = [NOT_A_RUN]  # (metrics.json `{}` alone: no run wrote this folder)
    run.status = "; ".join(problems) or (PRUNED if pruned else "ok")
    run.pictures = sorted((path / "attention").glob("*.png"), key=lambda p: natural(p.name))[:pictures]
    return run


def history(run: Run, metric: str) -> Dict[int, float]:
    """``metric`` per training epoch from the CSV logs (later versions win), less the final
    evaluation logged after fit."""
    last = run.summary.get("epochs")
    out: Dict[int, float] = {}
    for f in sorted(run.path.glob("csv/version_*/metrics.csv"), key=lambda p: natural(p.parent.name)):
        with f.open(newline="") as fh:
            for row in csv.DictReader(fh):
                try:
                    epoch, value = int(float(row["epoch"])), float(row.get(metric) or "nan")
                except (KeyError, ValueError):
                    continue
                if not math.isnan(value) and (last is None or epoch < last):
                    out[epoch] = value
    return out


def sweep_record(path: Path) -> Dict[str, Any]:
    """The ``hydra`` section of ``multirun.yaml``, else of the first job's ``.hydra/hydra.yaml``
    where it ran as a sweep's job (the Optuna sweeper writes no multirun.yaml); else {}."""
    try:
        if (path / "multirun.yaml").is_file():
            return (_load_yaml(path / "multirun.yaml") or {}).get("hydra") or {}
        jobs = sorted((c for c in path.iterdir() if c.name.isdigit() and (c / ".hydra" / "hydra.yaml").is_file()),
                      key=lambda c: int(c.name))
        hydra = ((_load_yaml(jobs[0] / ".hydra" / "hydra.yaml") or {}).get("hydra") or {}) if jobs else {}
        ran_as = str((hydra.get("job") or {}).get("num"))
        return hydra if hydra.get("mode") == "MULTIRUN" and ran_as == jobs[0].name else {}
    except (OSError, yaml.YAMLError, AttributeError):
        return {}


def find_runs(path: Path, pictures: int = 4) -> Tuple[str, List[Run]]:
    """("run", [run]), ("sweep", [its jobs' runs]) or ("runs", [a folder's runs])."""
    if not path.exists():
        raise ReportError(f"'{path}' does not exist")
    if not path.is_dir():
        raise ReportError(f"'{path}' is a file, not a run or multirun directory")
    if (path / "multirun.yaml").is_file() or not _is_run(path):
        children = sorted((c for c in path.iterdir() if _is_run(c)), key=lambda p: natural(p.name))
        if children or (path / "multirun.yaml").is_file():
            kind = "sweep" if sweep_record(path) or (path / "multirun.yaml").is_file() else "runs"
            return kind, [read_run(c, c.name, pictures) for c in children]
        sweeps = sorted(str(c) for c in path.iterdir() if (c / "multirun.yaml").is_file())
        hint = f" It holds multirun directories; report one of them: {', '.join(sweeps[:5])}" \
            if sweeps else ""
        raise ReportError(f"'{path}' is neither a run directory (config.yaml, metrics.json or "
                          f".hydra/) nor a multirun directory (multirun.yaml).{hint}")
    run = read_run(path, path.name, pictures)
    if run.status == NOT_A_RUN:
        raise ReportError(f"'{path}' is {NOT_A_RUN}; name a run directory (attnflow-train writes "
                          f"config.yaml as it starts) or a multirun directory")
    return "run", [run]


def _lower_isbetter(metric: str) -> bool:
    name = metric.rsplit("/", 1)[-1].lower()
    return any(name == w or name.endswith("_" + w) or name.startswith(w + "_") for w in LOWER_IS_BETTER)


def _task_class(config: Dict[str, Any]) -> Optional[Type[TaskContract]]:
    """The run's registered task class, or None."""
    name = (config.get("task") or {}).get("name")
    try:
        return TASKS.get(name) if name else None
    except ConfigError:
        return None


def choose_metric(runs: List[Run], sweeper: Dict[str, Any], metric: Optional[str] = None
                  ) -> Tuple[str, bool, str]:
    """(metric, maximize, source): a run's value of ``val/x`` is its result, ``best/val/x``. The
    direction: the sweeper's for ``optimized_metric``, the checkpoint's ``mode`` for its monitor,
    the task's declared one, else by name (loss: min)."""
    config = next((r.config for r in runs if r.config), {})
    ck = (config.get("callbacks") or {}).get("checkpoint") or {}
    source = "--metric"
    if not metric and config.get("optimized_metric"):
        metric, source = config["optimized_metric"], "optimized_metric"
        metric = metric[0] if isinstance(metric, list) else metric  # multi-objective: the first
    if not metric and ck.get("monitor"):
        metric, source = ck["monitor"], "callbacks.checkpoint.monitor"
    task = None if metric else _task_class(config)
    if not metric and task is not None and task.monitor:
        metric, source = task.monitor, f"task '{config['task']['name']}' monitor"
    if not metric:
        metric, source = "val/loss", "default"
    curve, metric = curve_name(metric), result_name(metric)
    direction = sweeper.get("direction")
    direction = direction[0] if isinstance(direction, list) and direction else direction
    if source == "optimized_metric" and isinstance(direction, str):
        return metric, "max" in direction.lower(), source
    if curve == ck.get("monitor") and ck.get("mode") in ("min", "max"):
        return metric, ck["mode"] == "max", source
    task = task or _task_class(config)
    mode = task.metrics.get(metric.rsplit("/", 1)[-1]) if task else None
    if mode in ("min", "max"):
        return metric, mode == "max", source
    return metric, not _lower_isbetter(metric), source


def swept_params(runs: List[Run]) -> Tuple[List[str], Dict[str, Any]]:
    """(parameters that differ between runs, overrides common to all): from the overrides where
    every run has them, else the configs (a key repeating a shorter key's values left out)."""
    with_cfg = [r for r in runs if r.overrides is not None or r.config]
    if not with_cfg:
        return [], {}
    by_overrides = all(r.overrides is not None for r in with_cfg)
    tables = [r.overrides if by_overrides else flatten(r.config) for r in with_cfg]
    keys: List[str] = []
    for t in tables:
        keys += [k for k in t if k not in keys]
    if len(with_cfg) == 1:
        return (keys, {}) if by_overrides else ([], {})
    swept, common, seen = [], {}, set()
    for k in sorted(keys, key=lambda k: (k.count("."), len(k))) if not by_overrides else keys:
        column = tuple(repr(t.get(k)) for t in tables)
        if len(set(column)) == 1:
            common[k] = tables[0].get(k)
        elif column not in seen:
            swept.append(k)
            seen.add(column)
    return swept, (common if by_overrides else {})


def sort_key(report_metric: str, maximize: bool):
    """Best first: ok runs by the metric, then pruned ones by the value they reached, ok runs
    without it, runs with a problem, and last folders that are not a run."""
    def key(run: Run):
        v = run.metrics.get(report_metric)
        if run.status not in ("ok", PRUNED) or v is None or math.isnan(v):
            return (2 if run.status == "ok" else 4 if run.status == NOT_A_RUN else 3, 0.0)
        return (0 if run.status == "ok" else 1, -v if maximize else v)
    return key


def _experiment(run: Run) -> Tuple[str, bool, str]:
    """(the metric a run alone is sorted by, its direction, its task and data)."""
    metric, maximize, _ = choose_metric([run], {})
    task = (run.config.get("task") or {}).get("name")
    data = run.config.get("data") or {}
    what = " ".join(str(v) for v in (data.get("name"), data.get("dataset")) if v)
    return metric, maximize, f"task {task or '?'} on {what or '?'} data"


def better(maximize: bool) -> str:
    return f"{'higher' if maximize else 'lower'} is better"


def check_experiments(report: Report, given: bool) -> None:
    """Runs of different experiments (metric, direction, task or data) do not compare: ranked
    within each experiment, or, with ``--metric``, with a note saying so."""
    groups: Dict[Tuple[str, bool, str], List[str]] = {}
    for r in sorted(report.runs, key=lambda r: natural(r.name)):  # folder order
        if r.config:
            groups.setdefault(_experiment(r), []).append(r.name)
    if len(groups) < 2:
        return
    if given:
        kinds = "; ".join(f"{listed(names, 3)}: {what}, sorted by {m} ({better(up)})"
                          for (m, up, what), names in groups.items())
        report.notes.append(f"the runs are of different experiments ({kinds}); sorted by "
                            f"{report.metric} (--metric) as asked, though their values may not compare")
        return
    _rank_within(report, groups)


def _rank_within(report: Report, groups: Dict[Tuple[str, bool, str], List[str]]) -> None:
    """The groups in folder order, each best first by its own metric; runs without config last."""
    report.groups = [Group(chr(ord("A") + i) if i < 26 else str(i + 1), what, m, up, names)
                     for i, ((m, up, what), names) in enumerate(groups.items())]
    order = {n: i for i, g in enumerate(report.groups) for n in g.runs}

    def key(run: Run):
        i = order.get(run.name, len(report.groups))
        g = report.groups[i] if i < len(report.groups) else None
        return (i, *(sort_key(g.metric, g.maximize)(run) if g else (3, 0.0)))
    report.runs.sort(key=key)
    metrics = {(g.metric, g.maximize) for g in report.groups}
    report.metric, report.maximize = next(iter(metrics)) if len(metrics) == 1 else ("", False)
    report.metric_source = "each experiment's own metric"
    runs = "jobs" if report.kind == "sweep" else "runs"
    report.notes.append(f"the {runs} are of different experiments, whose values do not compare: each "
                        f"is ranked on its own (column 'group'); give --metric to sort them all by one")


def build(path: Path | str, metric: Optional[str] = None, pictures: int = 4) -> Report:
    """Read a run or sweep directory into a :class:`Report` (runs sorted best first)."""
    path = Path(path)
    kind, runs = find_runs(path, pictures)
    sweeper = (sweep_record(path).get("sweeper") or {}) if kind == "sweep" else {}
    given, (metric, maximize, source) = metric, choose_metric(runs, sweeper, metric)
    runs.sort(key=sort_key(metric, maximize))  # stable: ties keep the job order
    params, common = swept_params(runs)
    report = Report(path, kind, runs, metric, maximize, source, params, common, sweeper)
    check_experiments(report, given=source == "--metric")
    if report.groups:
        return report
    if kind == "sweep" and not runs:
        report.notes.append("no job folders yet: the sweep has not started a job")
    logged = sorted({m for r in runs for m in r.metrics})
    if source == "--metric" and metric not in logged:
        if logged:
            raise ReportError(f"--metric '{given}': no run in '{path}' has it; metrics: "
                              f"{', '.join(logged)}")
        held = (f"its {len(runs)} run(s): {'; '.join(dict.fromkeys(r.status for r in runs))}"
                if runs else "it holds no job's run yet")
        raise ReportError(f"--metric '{given}': no run in '{path}' reports any metric ({held}); "
                          f"leave --metric out to list the runs with their status")
    if logged and metric not in logged:
        report.notes.append(f"no run has the metric '{metric}' (from {source}); metrics: "
                            f"{', '.join(logged)}")
    return report


def fmt(value: Any) -> str:
    """A cell: floats with 4 significant digits (the CSV keeps full precision)."""
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def metric_columns(report: Report) -> List[str]:
    names = {k for r in report.runs for k in r.metrics}
    rank = {"best": 0, "test": 1, "val": 2}  # the result, its test, then the curves' last points
    rest = sorted(names - {report.metric}, key=lambda m: (rank.get(m.split("/")[0], 2), m))
    return ([report.metric] if report.metric in names else []) + rest


def table(report: Report, full: bool = False) -> Tuple[List[str], List[List[Any]]]:
    """(header, rows): run, status, swept parameters, metrics, epochs, steps, fit seconds; raw
    values when ``full``."""
    metrics = metric_columns(report)
    grouped = ["group"] if report.groups else []
    header = ["run", "status", *grouped, *report.params, *metrics, "epochs", "global_step", "fit_seconds"]
    rows = []
    for r in report.runs:
        g = report.group(r) if grouped else None
        group = [g.name if g is not None else None] if grouped else []
        row = [r.name, r.status, *group, *(report.value(r, p) for p in report.params),
               *(r.metrics.get(m) for m in metrics),
               *(r.summary.get(k) for k in ("epochs", "global_step", "fit_seconds"))]
        rows.append(row if full else [fmt(v) for v in row])
    return header, rows


def best_runs(report: Report) -> List[Run]:
    """The best run of each experiment (of all, where ranked as one), if ok with the metric."""
    ranked = [(g.metric, [r for r in report.runs if r.name in g.runs]) for g in report.groups] \
        or [(report.metric, report.runs)]
    return [runs[0] for metric, runs in ranked if runs and runs[0].status == "ok"
            and runs[0].metrics.get(metric) is not None]


def best_run(report: Report) -> Optional[Run]:
    """The best run where the runs are ranked as one (its star in the plots), else None."""
    best = best_runs(report)
    return best[0] if best and not report.groups else None


def ranking(report: Report, where: bool = False) -> str:
    """How the table is ordered (``where``: and where the metric came from)."""
    if report.groups:
        return "ranked within each experiment, best first: " + "; ".join(
            f"{g.name} = {g.what}, by {g.metric} ({better(g.maximize)}): {listed(g.runs, 4)}"
            for g in report.groups)
    return (f"sorted by {report.metric} ({better(report.maximize)}"
            + (f"; from {report.metric_source})" if where else ")"))

