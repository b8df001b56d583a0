"""The comparison in W&B: a table with one row per example and one column per run (each cell
the run's attention picture), and the statistics as a second table. Offline unless
``$WANDB_MODE`` says otherwise, as attnflow's runs; project ``$WANDB_PROJECT``, else attnflow."""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import List, Tuple

from PIL import Image

from attnflow.compare.comparison import Comparison, fmt


def example_rows(c: Comparison) -> Tuple[List[str], List[List]]:
    """(columns, rows): ``example``, its title, then per run its picture (PIL image or None)."""
    columns = ["example", "title", *c.labels]
    rows = []
    for i, key in enumerate(c.keys()):
        pictures = [c.examples[label][i].picture for label in c.labels]
        rows.append([key, c.examples[c.labels[0]][i].title,
                     *(Image.open(io.BytesIO(p)) if p else None for p in pictures)])
    return columns, rows


def log_to_wandb(c: Comparison, out: Path, name: str) -> str:
    """One W&B run (job type ``compare``) holding both tables; its directory under ``out``."""
    import wandb  # (seconds of import: only for --wandb)

    columns, rows = example_rows(c)
    run = wandb.init(project=os.environ.get("WANDB_PROJECT") or "attnflow", job_type="compare",
                     name=name, dir=str(out), mode=os.environ.get("WANDB_MODE") or "offline",
                     config={"runs": {k: str(p) for k, p in c.paths.items()}})
    try:
        table = wandb.Table(columns=columns, data=[r[:2] + [wandb.Image(p) if p else None for p in r[2:]]
                                                   for r in rows])
        stats = wandb.Table(columns=c.columns, data=[[fmt(v) for v in r] for r in c.table])
        run.log({"compare/attention": table, "compare/statistics": stats})
        return str(run.dir)
    finally:
        run.finish()
