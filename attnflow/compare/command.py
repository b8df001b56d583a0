"""attnflow-compare's work once its arguments are parsed (imported by the command line only when
there is work: torch, Lightning and matplotlib are not for ``--help``)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional, Sequence

from rich.console import Console

from attnflow.compare.comparison import Choice, build_comparison
from attnflow.compare.page import check_out, print_tables, write_page
from attnflow.compare.runs import named_runs
from attnflow.compare.wandb_table import log_to_wandb


def compare(paths: Sequence[Path], out: Optional[Path], choice: dict, top: Optional[int] = None,
            wandb: bool = False) -> int:
    """Compare the runs ``paths`` name on the examples ``choice`` (:class:`Choice`'s fields):
    the page and figures to ``out`` (default ``<first path>/compare``), the tables printed."""
    out = out or paths[0] / "compare"
    check_out(out)  # before the runs are read
    named, skipped = named_runs(paths, top)
    if skipped:
        print(f"attnflow-compare: left out (no metrics): {', '.join(skipped)}", file=sys.stderr)
    comparison = build_comparison(named, Choice(**choice))
    files = write_page(comparison, out)
    if comparison.note:
        print(f"attnflow-compare: {comparison.note}", file=sys.stderr)
    print_tables(comparison, Console(width=200))
    if wandb:
        files["wandb"] = Path(log_to_wandb(comparison, out, f"compare {paths[0].name}"))
    print("wrote " + ", ".join(str(p) for p in files.values()))
    return 0
