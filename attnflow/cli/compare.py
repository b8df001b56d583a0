"""attnflow-compare: the same examples' attention in several runs, side by side, with statistics
and the diagnostics of the literature.

    attnflow-compare outputs/multirun/2026-12-07/10-00-00          # a sweep: every run, best first
    attnflow-compare RUN_A RUN_B --examples 4 --layer 0 --head 2   # runs; a layer and a head
    attnflow-compare SWEEP --ids 3,17,42 --alignments gold.txt     # chosen examples; AER
    attnflow-compare SWEEP/report --top 3 --wandb                   # a report's best 3; W&B table

Each run's best checkpoint reads the same validation examples (``--examples N``: the first N, or
across the classes as the run's dashboard takes them; ``--ids``: these, as numbers or a file of
them; graph runs: node ids), or ``--texts FILE``'s texts (translation: source<TAB>reference).
Translation and captioning attention is taken teacher-forced on the reference, so rows line up.
Writes ``compare.html`` (self-contained), ``stats.json`` and ``stats.csv`` to ``-o`` (default
``<first path>/compare``) and prints the statistics.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import List, Optional

from attnflow.cli.predict_io import positive
from attnflow.cli.tool import run_tool
from attnflow.io.text import path_arg


def ids_arg(value: str) -> List[int]:
    """``3,17,42`` or a file of such numbers (commas, spaces or lines between them)."""
    path = Path(value)
    text = path.read_text(encoding="utf-8") if path.is_file() else value
    parts = [p for p in re.split(r"[\s,]+", text) if p]
    if not parts or not all(p.isdigit() for p in parts):
        raise argparse.ArgumentTypeError(f"'{value}' is neither a list of example numbers "
                                         f"(3,17,42) nor a file of them")
    return [int(p) for p in parts]


def texts_arg(value: str) -> List[str]:
    """The non-blank lines of a file."""
    try:
        text = Path(value).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise argparse.ArgumentTypeError(f"cannot read '{value}': {err}") from None
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        raise argparse.ArgumentTypeError(f"'{value}' holds no texts")
    return lines


def natural(value: str) -> int:
    n = int(value)
    if n < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {n}")
    return n


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="attnflow-compare", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("paths", nargs="+", type=lambda v: Path(path_arg(v)),
                   help="run directories, a sweep (multirun) folder or a report folder")
    p.add_argument("--examples", type=positive, default=8, help="validation examples (default 8)")
    chosen = p.add_mutually_exclusive_group()
    chosen.add_argument("--ids", type=ids_arg, help="these validation examples (graph: nodes) instead")
    chosen.add_argument("--texts", type=texts_arg, help="a file of texts instead, one a line "
                        "(translation: source<TAB>reference)")
    p.add_argument("--layer", type=natural, help="the pictures' layer, from 0 (default: the last)")
    p.add_argument("--head", type=natural, help="the pictures' head, from 0 (default: mean over heads)")
    p.add_argument("--top", type=positive, help="of a sweep: its best N runs")
    p.add_argument("--permutations", type=natural, default=20,
                   help="Jain & Wallace's permutations per example (default 20; 0: none)")
    p.add_argument("--alignments", type=Path, help="gold word alignments (Pharaoh i-j), one line per example")
    p.add_argument("--device", default="cpu")
    p.add_argument("--wandb", action="store_true", help="also a W&B table (offline unless $WANDB_MODE)")
    p.add_argument("-o", "--out", type=lambda v: Path(path_arg(v)), help="output folder")
    return p


def _compare(args) -> int:
    from attnflow.compare.command import compare  # (seconds of imports: not for --help)

    choice = {k: vars(args)[k] for k in ("examples", "ids", "texts", "layer", "head",
                                         "permutations", "alignments", "device")}
    return compare(args.paths, args.out, choice, args.top, args.wandb)


def main(argv: Optional[List[str]] = None) -> int:
    return run_tool(_parser(), argv, _compare, (OSError, ValueError))


if __name__ == "__main__":
    sys.exit(main())
