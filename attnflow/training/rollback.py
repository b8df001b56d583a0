"""What a failed training command leaves in its run folder. A command that saved no checkpoint
takes back what it wrote (a resume's folder is byte-identical to before: its ``resume-<n>.yaml``,
CSV version and log lines go, the small files it changed get their bytes back); one that saved a
checkpoint keeps everything, and its message names the checkpoints kept (a write that fails leaves no part: every file attnflow writes is
written to a temporary name and renamed).
"""

from __future__ import annotations

from pathlib import Path

from attnflow.io import folders
from attnflow.io.console import command
from attnflow.io.folders import Snapshot
from attnflow.training import runlock


def snapshot(folder: Path | str) -> Snapshot:
    """Every file and folder under ``folder`` (empty where it is missing, or where this process
    is not the first rank: it takes nothing back, and another node may be writing there)."""
    return folders.snapshot(folder) if runlock.first_rank() else {}


def roll_back(folder: Path | str, before: Snapshot) -> bool:
    """Take back what was written under ``folder`` since ``before`` unless a checkpoint was
    (:func:`attnflow.io.folders.take_back`; the lock stays). Whether it did. Only the first rank
    does (another node's ``before`` may predate the first rank's files)."""
    return runlock.first_rank() and folders.take_back(folder, before, keep=runlock.NAME)


def kept(folder: Path | str) -> str:
    """The checkpoints a run folder holds, and how to go on, for a message."""
    names = sorted(p.name for p in (Path(folder) / "checkpoints").glob("*.ckpt"))
    go_on = (f"once it can write: {command('attnflow-train', resume=str(folder))}" if "last.ckpt" in names
             else "no last.ckpt to resume from")
    return f"kept {', '.join(names)} in {folder}/checkpoints; {go_on}"
