"""SLURM requeue. A batch job warned with SIGUSR1 (``#SBATCH --signal=USR1@90``) stops after the
running step with ``last.ckpt`` (:mod:`attnflow.training.preemption`), asks SLURM to requeue it
(``scontrol requeue``, as Lightning's auto-requeue does) and leaves a note,
``<paths.output_root>/.requeued/<job id>``, naming its run. The requeued job runs the same command;
:func:`requeued_run` finds the note and the command becomes ``resume=<run>``: the run goes on in its
own folder from the step it stopped at. Lightning's own requeue (an ``hpc_ckpt`` attnflow does not
resume from) is turned off (:func:`plugins`).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import List, Optional

from lightning_fabric.plugins.environments import SLURMEnvironment

from attnflow.training.runlock import first_rank

NOTES = ".requeued"


def job_id() -> Optional[str]:
    """This SLURM batch job's id (``<array job>_<task>`` in an array), None outside SLURM."""
    if not SLURMEnvironment.detect():  # (srun --job-name=interactive: not a batch job)
        return None
    array = os.environ.get("SLURM_ARRAY_JOB_ID")
    return f"{array}_{os.environ.get('SLURM_ARRAY_TASK_ID')}" if array else os.environ.get("SLURM_JOB_ID")


def plugins() -> List[object]:
    """Lightning's SLURM environment without its requeue, inside a SLURM job."""
    return [SLURMEnvironment(auto_requeue=False)] if job_id() else []


def requeue(run_dir: Path | str, output_root: Path | str) -> Optional[str]:
    """Requeue this SLURM job to continue ``run_dir``: what was done, for a message (None outside
    SLURM)."""
    job = job_id()
    if not job:
        return None
    note = Path(output_root) / NOTES / job
    note.parent.mkdir(parents=True, exist_ok=True)
    note.write_text(f"{Path(run_dir).resolve()}\n")
    try:
        done = subprocess.run(["scontrol", "requeue", job], capture_output=True, text=True, timeout=60)
        why = done.returncode and (done.stderr.strip() or f"exit status {done.returncode}")
    except (OSError, subprocess.TimeoutExpired) as err:
        why = str(err)
    if why:
        note.unlink(missing_ok=True)
        return f"scontrol requeue {job} failed ({why})"
    return f"SLURM job {job} requeued: it continues this run"


def requeued_run(output_root: Path | str) -> Optional[Path]:
    """The note of a requeued SLURM job that names the run it continues, else None (every rank
    reads it; :func:`forget` it when the run ends)."""
    job = job_id()
    if not job or os.environ.get("SLURM_RESTART_COUNT", "0") == "0":
        return None
    note = Path(output_root) / NOTES / job
    return note if note.is_file() else None


def forget(note: Path) -> None:
    """Remove a requeued job's note once its run has ended (by the first rank)."""
    if first_rank():
        note.unlink(missing_ok=True)
