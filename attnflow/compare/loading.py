"""A run rebuilt for comparison: its task (model inside, the best checkpoint's weights) and its
data module set up on the validation split, whose ``example_batch`` gives the examples."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Tuple

from attnflow.inference.runs import data_module, open_run, rebuild
from attnflow.io.checkpoints import Run, run_artifacts


def load_task(target: Path | str | Run, device: str = "cpu") -> Tuple[Any, Any, Run]:
    """(task in eval mode, reading ``dm``'s tokenizer, data module ``dm``, run) of a run directory
    or checkpoint."""
    run = target if isinstance(target, Run) else open_run(target, device)
    dm = data_module(run)
    dm.setup_evaluation(run.run_dir, run_artifacts(run), "val")
    task = rebuild(run, dm.model_context(), f" built for data '{run.config['data'].get('name')}'",
                   dm.task_context(), device=device)
    task.use_data(dm)
    return task, dm, run
