"""What a failed training command leaves in its run folder. A command that saved no checkpoint
takes back what it wrote (a resume's folder is byte-identical to before: its ``resume-<n>.yaml``,
CSV version and log lines go, the small files it changed get their bytes back); one that saved a
checkpoint keeps everything, and its message names the checkpoints kept (a write that fails leaves no part: every file attnflow writes is
written to a temporary name and renamed).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Dict

from attnflow.io.console import command
from attnflow.io.text import atomic_path
from attnflow.training import runlock

Snapshot = Dict[str, tuple]  # {path relative to the folder: (size, mtime_ns, bytes)}; folders: ()
SMALL = 1 << 22  # the bytes of files up to this size are kept, to be put back


def snapshot(folder: Path | str) -> Snapshot:
    """Every file and folder under ``folder`` (empty where it is missing, or where this process
    is not the first rank: it takes nothing back, and another node may be writing there)."""
    folder = Path(folder)
    if not folder.is_dir() or not runlock.first_rank():
        return {}
    out: Snapshot = {}
    for p in folder.rglob("*"):
        st = p.lstat()
        if p.is_dir():
            out[p.relative_to(folder).as_posix()] = ()
        else:
            data = p.read_bytes() if st.st_size <= SMALL and p.suffix != ".ckpt" else None
            out[p.relative_to(folder).as_posix()] = (st.st_size, st.st_mtime_ns, data)
    return out


def roll_back(folder: Path | str, before: Snapshot) -> bool:
    """Take back what was written under ``folder`` since ``before`` unless a checkpoint was: new
    files and folders go, small files changed or deleted get their bytes back. Whether it did.
    Only the first rank does (another node's ``before`` may predate the first rank's files)."""
    if not runlock.first_rank():
        return False
    folder, now = Path(folder), snapshot(folder)
    if any(k.endswith(".ckpt") and before.get(k, ())[:2] != v[:2] for k, v in now.items()):
        return False  # (a checkpoint written since: everything stays)
    for rel, entry in sorted(now.items(), reverse=True):  # (a folder after its files)
        if rel not in before and rel != runlock.NAME:
            path = folder / rel
            shutil.rmtree(path, ignore_errors=True) if entry == () else path.unlink(missing_ok=True)
    for rel, entry in sorted(before.items()):
        if entry == ():
            (folder / rel).mkdir(parents=True, exist_ok=True)
        elif entry[2] is not None and now.get(rel, ())[:2] != entry[:2] and rel != runlock.NAME:
            with atomic_path(folder / rel) as tmp:
                tmp.write_bytes(entry[2])
            os.utime(folder / rel, ns=(entry[1], entry[1]))
    return True


def kept(folder: Path | str) -> str:
    """The checkpoints a run folder holds, and how to go on, for a message."""
    names = sorted(p.name for p in (Path(folder) / "checkpoints").glob("*.ckpt"))
    go_on = (f"once it can write: {command('attnflow-train', resume=str(folder))}" if "last.ckpt" in names
             else "no last.ckpt to resume from")
    return f"kept {', '.join(names)} in {folder}/checkpoints; {go_on}"
