"""Which runs a comparison holds: run directories, a sweep's (its best first, named by what was
swept) or a report folder's; runs of different families or data sets are refused."""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from attnflow.compare.stats import CompareError
from attnflow.config.registry import DATA
from attnflow.inference.runs import open_run
from attnflow.io.checkpoints import Run
from attnflow.viz.report_pages import REPORT_OF
from attnflow.viz.runs import PRUNED, build, find_runs

Named = List[Tuple[str, Path]]


def _source(path: Path) -> Path:
    """A report folder's source (``.report-of``), else ``path``."""
    mark = path / REPORT_OF
    return Path(mark.read_text(encoding="utf-8").strip()) if mark.is_file() else path


def _label(report, run) -> str:
    """A sweep's run named by its swept values (``scorer=dot``; ``model.scorer.name=dot`` as
    ``scorer=dot``), else by its folder."""
    values = [f"{p.removesuffix('.name').split('.')[-1] if p.endswith('.name') else p}="
              f"{report.value(run, p)}" for p in report.params if report.value(run, p) is not None]
    return ", ".join(values) or run.name


def _folder_runs(path: Path, top: Optional[int]) -> Tuple[Named, List[str]]:
    """A sweep or folder of runs: those with metrics, best first, and the names of the others."""
    report = build(path)
    usable = [r for r in report.runs if r.status in ("ok", PRUNED)]
    skipped = [f"{r.name} ({r.status})" for r in report.runs if r not in usable]
    usable = usable[:top] if top else usable
    return [(_label(report, r), r.path) for r in usable], skipped


def named_runs(paths: Sequence[Path], top: Optional[int] = None) -> Tuple[Named, List[str]]:
    """(label, run directory) of every run the paths name, and the runs left out (with why)."""
    named: Named = []
    skipped: List[str] = []
    for path in paths:
        path = _source(Path(path))
        kind, _ = find_runs(path, pictures=0)
        if kind == "run":
            named.append((path.name, path))
            continue
        runs, left = _folder_runs(path, top)
        named += runs
        skipped += left
    if len(named) < 2:
        raise CompareError(f"{len(named)} run to compare in {', '.join(map(str, paths))}"
                           + (f" (left out: {', '.join(skipped)})" if skipped else "")
                           + "; name two runs or more, or a sweep of two or more")
    return _unique(named), skipped


def _unique(named: Named) -> Named:
    """Labels made unique with the run's folder where two runs share one."""
    labels = [label for label, _ in named]
    return [(label if labels.count(label) == 1 else f"{label} ({path.name})", path)
            for label, path in named]


def _identity(run: Run) -> Tuple[str, Dict[str, object]]:
    """(model name, the data fields that name the data set)."""
    data = run.config.get("data") or {}
    name = data.get("name")
    fields = DATA.get(name).source_fields if name in DATA.names() else ()
    return str((run.config.get("model") or {}).get("name")), {
        "data": name, **{f"data.{f}": data.get(f) for f in fields}}


def open_runs(named: Named, device: str = "cpu") -> Dict[str, Run]:
    """The runs opened (best checkpoint), refused in one line when their model or data set
    differs from the first's."""
    runs = {label: open_run(path, device) for label, path in named}
    (first, run0), *rest = runs.items()
    model0, data0 = _identity(run0)
    for label, run in rest:
        model, data = _identity(run)
        if model != model0:
            raise CompareError(f"{label} is model '{model}' and {first} model '{model0}': runs of "
                               f"different families are not compared side by side")
        diff = [f"{k}={data.get(k)} against {v}" for k, v in data0.items() if data.get(k) != v]
        if diff:
            raise CompareError(f"{label} was trained on other data than {first} ({'; '.join(diff)}); "
                               f"compare runs of one data set")
    return runs
