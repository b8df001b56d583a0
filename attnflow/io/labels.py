"""A classifier run's class names beside its ``config.yaml``: ``labels.json``, a list in the
model's output order (``["neg", "pos"]``; a multitask run: one list per task). The run writes
it; attnflow-predict and attnflow-export read it (edited names included) before the names the
checkpoint carries, as Hugging Face reads ``id2label`` from ``config.json``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List, Optional, Union

from attnflow.io.checkpoints import CheckpointError, Run, run_artifacts
from attnflow.io.text import write_json

LABELS = "labels.json"
Names = Union[List[str], Dict[str, List[str]]]


class LabelsError(CheckpointError):
    """A ``labels.json`` that is no list of class names; the message names the file."""


def save_labels(run_dir: Path | str, names: Optional[Names]) -> Optional[Path]:
    """``names`` into ``<run_dir>/labels.json`` where there are some and the file is not there
    yet (a resumed run keeps the file, and any names edited in it)."""
    path = Path(run_dir) / LABELS
    if names is None or path.exists():
        return None
    write_json(path, names, indent=2, ensure_ascii=False)
    return path


def _names(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def run_labels(run_dir: Path | str) -> Optional[Names]:
    """The names in ``<run_dir>/labels.json``; None without the file."""
    path = Path(run_dir) / LABELS
    if not path.is_file():
        return None
    try:
        names = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as err:
        raise LabelsError(f"{path} is not valid JSON ({err})") from None
    if not (_names(names) or isinstance(names, dict) and all(map(_names, names.values()))):
        raise LabelsError(f"{path} must list the class names in the model's order, as strings "
                          f"([\"neg\", \"pos\"]; a multitask run: one list per task)")
    return names


def check_count(names: List[str], classes: int, run_dir: Path | str, task: str = "") -> List[str]:
    """``names`` where they are ``classes`` many, else a :class:`LabelsError`."""
    if len(names) != classes:
        of = f" for task '{task}'" if task else ""
        raise LabelsError(f"{Path(run_dir) / LABELS} lists {len(names)} names{of}; the run's model "
                          f"has {classes} classes")
    return names


def _shaped(names: Names, run_dir: Path | str, multitask: bool) -> Names:
    """``names`` where their shape is the run's (a list per task for a multitask run)."""
    if isinstance(names, dict) != multitask:
        raise LabelsError(f"{Path(run_dir) / LABELS} must hold " + (
            "one list of names per task: the run is a multitask run" if multitask else
            "one list of names: the run has one task"))
    return names


def label_list(run_dir: Path | str, classes: int) -> Optional[List[str]]:
    """The one list of ``labels.json`` of a single-task run with ``classes`` classes; None
    without the file."""
    names = run_labels(run_dir)
    return None if names is None else check_count(_shaped(names, run_dir, False), classes, run_dir)


def named_artifacts(run: Run) -> Dict[str, Any]:
    """:func:`~attnflow.io.checkpoints.run_artifacts` with the names of ``labels.json``, where
    the run has one, in place of the ``class_names`` the checkpoint carries (as many)."""
    art = run_artifacts(run)
    tasks = art.get("tasks") if isinstance(art.get("tasks"), dict) else None
    if tasks is None:
        names = label_list(run.run_dir, len(art["class_names"])) if "class_names" in art else None
        if names is not None:
            art["class_names"] = names
        return art
    names = run_labels(run.run_dir)
    for t, part in tasks.items() if names is not None else ():
        if t in _shaped(names, run.run_dir, True) and "class_names" in part:
            part["class_names"] = check_count(names[t], len(part["class_names"]), run.run_dir, t)
    return art
