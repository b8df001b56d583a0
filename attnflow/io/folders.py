"""A folder's files as the commands that write run folders use them: an exclusive lock file
(:func:`take`, an ``flock`` the kernel releases however its process ends), and a snapshot of
what a folder holds, to take back what a failed command wrote there (:func:`take_back`).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import socket
import time
from pathlib import Path
from typing import Dict, Optional, Tuple

from attnflow.io.text import atomic_path

Snapshot = Dict[str, tuple]  # {path relative to the folder: (size, mtime_ns, bytes)}; folders: ()
SMALL = 1 << 22  # the bytes of files up to this size are kept, to be put back


def take(path: Path) -> Tuple[Optional[int], str]:
    """Lock the file ``path`` (made, with its folder) for this process: (its open descriptor,
    ""), or (None, who holds it) where another process does; OSError where it cannot be made."""
    while True:
        path.parent.mkdir(parents=True, exist_ok=True)  # (again after a holder removed the folder)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 256).decode(errors="replace").strip() or "another process"
            os.close(fd)
            return None, holder
        with contextlib.suppress(FileNotFoundError):
            if os.fstat(fd).st_ino == os.stat(path).st_ino:
                break  # (else its holder removed it as it ended: lock the new one)
        os.close(fd)
    os.ftruncate(fd, 0)
    os.write(fd, f"pid {os.getpid()} on {socket.gethostname()} since "
                 f"{time.strftime('%Y-%m-%d %H:%M:%S')}\n".encode())
    return fd, ""


def snapshot(folder: Path | str) -> Snapshot:
    """Every file and folder under ``folder`` (empty where it is missing)."""
    folder = Path(folder)
    if not folder.is_dir():
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


def take_back(folder: Path | str, before: Snapshot, keep: str) -> bool:
    """Take back what was written under ``folder`` since ``before`` unless a checkpoint was: new
    files and folders go (but ``keep``), small files changed or deleted get their bytes back.
    Whether it did."""
    folder, now = Path(folder), snapshot(folder)
    if any(k.endswith(".ckpt") and before.get(k, ())[:2] != v[:2] for k, v in now.items()):
        return False  # (a checkpoint written since: everything stays)
    for rel, entry in sorted(now.items(), reverse=True):  # (a folder after its files)
        if rel not in before and rel != keep:
            path = folder / rel
            shutil.rmtree(path, ignore_errors=True) if entry == () else path.unlink(missing_ok=True)
    for rel, entry in sorted(before.items()):
        if entry == ():
            (folder / rel).mkdir(parents=True, exist_ok=True)
        elif entry[2] is not None and now.get(rel, ())[:2] != entry[:2] and rel != keep:
            with atomic_path(folder / rel) as tmp:
                tmp.write_bytes(entry[2])
            os.utime(folder / rel, ns=(entry[1], entry[1]))
    return True
