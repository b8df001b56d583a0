"""Checkpoint files written whole and their weights averaged: what the trainer and
``attnflow-average`` write, beside :mod:`attnflow.io.checkpoints`, which reads them. A file is
written to a temporary name, fsynced and renamed, with its digest (``<name>.sha256``) after it.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

import torch

from attnflow.io import checkpoints
from attnflow.io.checkpoints import AVG_DIR, digest_line, digest_path
from attnflow.io.text import atomic_path


class _Writes:
    """A file's ``write`` and ``flush`` that keep the first ``OSError`` (torch's writer reports
    a failed write as a RuntimeError naming byte offsets) and the sha256 of the bytes written
    (the checkpoint's digest, without holding or reading them again)."""

    def __init__(self, f: Any) -> None:
        self.f, self.error, self.sha = f, None, hashlib.sha256()

    def write(self, data: Any) -> int:
        try:
            written = self.f.write(data)
        except OSError as err:
            self.error = self.error or err
            raise
        self.sha.update(data)
        return written

    def flush(self) -> None:
        self.f.flush()


def atomic_torch_save(obj: Any, path: Path | str) -> None:
    """``torch.save`` streamed to a temporary file, fsynced and renamed: the old file or the new,
    never a part; then its digest (``<name>.sha256``, of the bytes written), the old one removed
    before the rename, so that a kill leaves a checkpoint without a digest at worst, never one
    with another's. A failed write (a full disk) is an ``OSError`` naming ``path``."""
    path = Path(path)
    for stale in path.parent.glob(f".{path.name}.*.tmp"):  # parts left by a process killed mid-save
        stale.unlink(missing_ok=True)
    with atomic_path(path) as tmp:
        writes = None
        try:
            with open(tmp, "wb") as f:  # (closing flushes too: a full disk can refuse that)
                writes = _Writes(f)
                torch.save(obj, writes)
                f.flush()
                os.fsync(f.fileno())
        except (OSError, RuntimeError) as err:
            err = (writes.error if writes is not None else None) or err
            if isinstance(err, OSError) and err.errno:
                raise OSError(err.errno, err.strerror, str(path)) from None
            raise
        digest_path(path).unlink(missing_ok=True)
    _write_digest(path, writes.sha.hexdigest())
    with contextlib.suppress(OSError):  # the rename too, where folders can be fsynced
        fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _write_digest(path: Path, hexdigest: str) -> None:
    """``path``'s digest file, written atomically and fsynced; a failure names it."""
    side = digest_path(path)
    try:
        with atomic_path(side) as tmp, open(tmp, "w", encoding="ascii") as f:
            f.write(digest_line(hexdigest, path))
            f.flush()
            os.fsync(f.fileno())
    except OSError as err:
        raise OSError(err.errno, err.strerror, str(side)) from None


def remove_checkpoint(path: Path | str) -> None:
    """Delete a checkpoint and its digest (where there are)."""
    Path(path).unlink(missing_ok=True)
    digest_path(path).unlink(missing_ok=True)


def average_state_dicts(paths: Sequence[Path]) -> Dict[str, torch.Tensor]:
    """The element-wise mean of the files' ``state_dict``: floats summed in float64, one file in
    memory at a time; other dtypes from the last. Tied weights stay tied."""
    total: Dict[str, torch.Tensor] = {}
    newest: Dict[str, torch.Tensor] = {}
    keys = None
    alias: Optional[Dict[str, str]] = None  # a name → the first name of the same tensor
    for path in paths:
        state = checkpoints.read_checkpoint(path)["state_dict"]
        ties = _aliases(state)
        alias = ties if alias is None else {k: a for k, a in alias.items() if ties.get(k) == a}
        if keys is None:
            keys = list(state)
        elif set(state) != set(keys):
            odd = sorted(set(state) ^ set(keys))[0]
            raise ValueError(f"{path} holds other weights than {paths[0]} (e.g. {odd}); "
                             f"they cannot be averaged")
        for k, v in state.items():
            if v.is_floating_point() or v.is_complex():
                acc = v.to(torch.complex128 if v.is_complex() else torch.float64)
                total[k] = total[k] + acc if k in total else acc.clone()
            newest[k] = v
    n = len(paths)
    mean = {k: (total[k] / n).to(v.dtype) if k in total else v.clone() for k, v in newest.items()}
    return {k: mean[(alias or {}).get(k, k)] for k in mean}


def _aliases(state: Dict[str, torch.Tensor]) -> Dict[str, str]:
    """{name: the first name holding the same tensor} for the later names of each group."""
    first: Dict[tuple, str] = {}
    alias = {}
    for k, v in state.items():
        key = (v.untyped_storage().data_ptr(), v.storage_offset(), tuple(v.shape), v.stride(), v.dtype)
        if key in first:
            alias[k] = first[key]
        else:
            first[key] = k
    return alias


def average_into(run_dir: Path, index: Dict[str, Any], kept: List[Dict[str, Any]], base: Path,
                 out: Path) -> Dict[str, Any]:
    """Write the mean of the ``kept`` entries' files (``callbacks.average``'s, listed in
    ``index``) into a copy of ``base`` at ``out``, with ``attnflow_average`` recording what was
    averaged; returns that record and ``path``."""
    avg_dir = run_dir / "checkpoints" / AVG_DIR
    record = {"path": str(out), "by": index["by"], "n": index["n"], "monitor": index.get("monitor"),
              "epochs": [e["epoch"] for e in kept], "steps": [e["step"] for e in kept],
              "scores": [e["score"] for e in kept],
              "files": [str(avg_dir / e["file"]) for e in kept], "copy_of": str(base)}
    ckpt = checkpoints.read_checkpoint(base)
    averaged = average_state_dicts([avg_dir / e["file"] for e in kept])
    if set(averaged) != set(ckpt["state_dict"]):
        raise ValueError(f"the weights in {avg_dir} are not those of {base}; not averaged")
    ckpt["state_dict"] = averaged
    ckpt["attnflow_average"] = {k: v for k, v in record.items() if k != "path"}
    atomic_torch_save(ckpt, out)
    return record
