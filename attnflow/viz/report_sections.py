"""The parts of a report over several tasks (:mod:`attnflow.viz.report_pages`): the runs of each
experiment (or, sorted as one by ``--metric``, of each task) get a table of their own, with only
the columns their runs fill, and learning curves of their own, so that no table holds every
task's metrics side by side and no plot draws one task's curves over another's.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, List, Optional, Tuple

from attnflow.viz.runs import Report, Run, table

NO_CONFIG = "runs without a config"
MOST_METRICS = 12  # metric columns in one HTML table (a page 1,400 px wide holds them)


@dataclasses.dataclass
class Section:
    """Runs shown together: a heading (``""``: the report's runs are one), a short key for file
    names, the runs in the report's order, and the metric they are ranked by."""

    title: str
    key: str
    runs: List[Run]
    metric: str


def task_of(run: Run) -> Optional[str]:
    """The task a run trained (its ``config.yaml``'s ``task.name``), or None."""
    task = run.config.get("task")
    name = task.get("name") if isinstance(task, dict) else None
    return str(name) if name else None


def sections(report: Report) -> List[Section]:
    """One section per experiment where the runs are ranked within each; else, where they are
    of several tasks (sorted as one by ``--metric``), one per task; else one of every run."""
    if report.groups:
        out = []
        for g in report.groups:
            runs = [r for r in report.runs if r.name in g.runs]
            task = next((t for t in map(task_of, runs) if t), "")
            out.append(Section(f"{g.name}: {g.what}", f"{g.name}_{task}".rstrip("_"), runs, g.metric))
        rest = [r for r in report.runs if report.group(r) is None]
        return out + [Section(NO_CONFIG, "none", rest, report.metric)] * bool(rest)
    by_task: Dict[Optional[str], List[Run]] = {}
    for r in report.runs:
        by_task.setdefault(task_of(r), []).append(r)
    if len([t for t in by_task if t]) < 2:
        return [Section("", "", list(report.runs), report.metric)]
    return [Section(f"task {t}" if t else NO_CONFIG, t or "none", runs, report.metric)
            for t, runs in sorted(by_task.items(), key=lambda item: item[0] is None)]


def section_table(report: Report, section: Section) -> Tuple[List[str], List[List[Any]]]:
    """(header, rows) of a section's runs: the report's table (:func:`~attnflow.viz.runs.table`)
    less the columns none of them fills, its ranking metric first; the report's own table where
    the section is all of it."""
    if not section.title:
        return table(report)
    part = dataclasses.replace(report, runs=section.runs, groups=[], metric=section.metric)
    header, rows = table(part)
    keep = [i for i, h in enumerate(header) if h in ("run", "status") or any(row[i] != "" for row in rows)]
    return [header[i] for i in keep], [[row[i] for i in keep] for row in rows]


def column_blocks(header: List[str], metrics: List[str], most: int = MOST_METRICS) -> List[List[int]]:
    """The columns (indices into ``header``) of each table a section's table is shown as, each
    with the columns before the metrics (run, status, parameters): one table where it has at
    most ``most`` of the ``metrics``; else a table per split (``val/…``, ``test/…``), those of
    more than ``most`` in parts, the columns after the metrics (epochs, …) in the last."""
    measured = [i for i, h in enumerate(header) if h in set(metrics)]
    if len(measured) <= most:
        return [list(range(len(header)))]
    lead = [i for i in range(len(header)) if i < measured[0] and i not in measured]
    tail = [i for i in range(len(header)) if i > measured[-1]]
    by_split: Dict[str, List[int]] = {}
    for i in measured:
        by_split.setdefault(header[i].split("/", 1)[0], []).append(i)
    blocks = [cols[j:j + most] for cols in by_split.values() for j in range(0, len(cols), most)]
    return [lead + block + tail * (n == len(blocks) - 1) for n, block in enumerate(blocks)]
