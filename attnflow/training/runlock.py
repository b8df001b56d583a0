"""One writer per run folder: ``<run>/.lock``, an exclusive ``flock`` held by the process that trains
there (its first rank), naming its pid and host (:func:`attnflow.io.folders.take`). The kernel
releases it however the process ends: a file left by ``kill -9`` is stale and taken over; a clean
end removes it. One writer per output file the same way (:func:`writing`): ``.<name>.lock`` beside
it.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Dict

from attnflow.config.registry import ConfigError
from attnflow.io.folders import take

NAME = ".lock"
_HELD: Dict[str, int] = {}  # {resolved run folder: the open, locked file}
_MADE: Dict[str, Path] = {}  # {resolved run folder: the outermost folder hold() made for it}


class RunInUseError(ConfigError):
    """The run folder is another process's."""


def first_rank() -> bool:
    """Whether this process is global rank 0 of a distributed job (or the only process), before
    a Trainer exists: as the cluster environment Lightning will choose ranks it (torchrun's
    ``RANK``, SLURM's ``SLURM_PROCID``, LSF's; else Lightning's own ``NODE_RANK`` or
    ``GROUP_RANK`` with ``LOCAL_RANK``), so that one process of all nodes holds the run folder.
    (Lightning is imported here, not above: torch takes seconds, and the console script imports
    this module before it checks a command line.)"""
    from lightning_fabric.plugins.environments import (LightningEnvironment, LSFEnvironment,
                                                       SLURMEnvironment, TorchElasticEnvironment)

    for kind in (TorchElasticEnvironment, SLURMEnvironment, LSFEnvironment):  # Lightning's order
        if kind.detect():
            return kind().global_rank() == 0
    own = LightningEnvironment()
    return own.node_rank() == 0 and own.local_rank() == 0


def hold(run_dir: Path | str, advice: str = "") -> bool:
    """Lock ``run_dir`` (made if missing) for this process; False where this process holds it
    already, :class:`RunInUseError` (ending with ``advice``) where another does."""
    run_dir = Path(run_dir)
    key = str(run_dir.resolve())
    if key in _HELD:
        return False
    missing = [p for p in (run_dir.absolute(), *run_dir.absolute().parents) if not p.exists()]
    try:
        fd, holder = take(run_dir / NAME)
    except OSError as err:
        raise ConfigError(f"cannot write the run folder {run_dir}: {err.strerror}") from None
    if fd is None:
        raise RunInUseError(f"{run_dir} is in use by {holder}: " + (
            advice or f"one run writes a folder at a time; wait for it to end (a stopped "
                      f"run continues with resume={run_dir})"))
    _HELD[key] = fd
    if missing:
        _MADE[key] = missing[-1]
    return True


def output_lock_path(path: Path | str) -> Path:
    """The lock file of an output file: ``.<name>.lock`` beside it."""
    path = Path(path)
    return path.with_name(f".{path.name}.lock")


@contextlib.contextmanager
def writing(path: Path | str, what: str):
    """The output file ``path`` is this process's to write for the block (its lock file beside
    it), else :class:`RunInUseError` at once: ``what`` names it (``-o out.json``)."""
    lock = output_lock_path(path)
    try:
        fd, holder = take(lock)
    except OSError as err:
        raise ConfigError(f"{what}: cannot write {lock}: {err.strerror}") from None
    if fd is None:
        raise RunInUseError(f"{what} is being written by {holder}: give another name, or wait "
                            f"for that one to end")
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            lock.unlink()
        os.close(fd)


def release(run_dir: Path | str) -> None:
    """Remove and unlock ``run_dir``'s lock if this process holds it; the folders :func:`hold`
    made go too while empty (a command refused after the lock leaves none behind)."""
    key = str(Path(run_dir).resolve())
    fd, made = _HELD.pop(key, None), _MADE.pop(key, None)
    if fd is None:
        return
    with contextlib.suppress(OSError):
        (Path(run_dir) / NAME).unlink()
    os.close(fd)
    folder = Path(run_dir).absolute()
    while made is not None and folder.is_relative_to(made):
        try:
            folder.rmdir()
        except FileNotFoundError:  # (a failed run's folder, taken back)
            pass
        except OSError:  # (not empty: the run wrote there)
            break
        folder = folder.parent


def release_all() -> None:
    """Release every run folder this process holds."""
    for key in list(_HELD):
        release(key)


@contextlib.contextmanager
def holding(run_dir: Path | str):
    """``run_dir`` locked for the block (by the first rank), released after it if locked here."""
    took = first_rank() and hold(run_dir)
    try:
        yield
    finally:
        if took:
            release(run_dir)
