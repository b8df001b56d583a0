"""attnflow-average: the averaged checkpoint of a run that stopped before its fit ended.

    attnflow-average RUN                      # the kept epochs → RUN/checkpoints/averaged.ckpt
    attnflow-average RUN --epochs 3 4 5 --name avg-345.ckpt   # RUN/checkpoints/avg-345.ckpt
    attnflow-eval RUN/checkpoints/averaged.ckpt split=val     # then evaluate it

A run trained with ``callbacks.average`` keeps its candidate epochs in ``checkpoints/avg/``
(``kept.json``) and writes ``averaged.ckpt`` when the fit ends (:mod:`attnflow.training.averaging`).
For a run stopped before, this writes the same: the mean of the kept epochs' weights in a copy of
``last.ckpt`` (else the newest ``epoch*.ckpt``). ``--epochs`` averages a subset (choose it on
validation scores, never on a test split). An existing output is never overwritten.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import List, Optional

from rich.console import Console
from rich.table import Table

from attnflow.io.checkpoints import AVERAGED, AVG_DIR, INDEX, CheckpointError, read_index, runs_inside
from attnflow.io.console import command
from attnflow.io.text import InputError, check_folder, path_arg


def plan(run_dir: Path, epochs: Optional[List[int]], name: str = AVERAGED) -> tuple:
    """(``kept.json``, its kept entries, those to average, the checkpoint to copy, the output
    path); a :class:`CheckpointError` naming what is wrong otherwise."""
    if not run_dir.is_dir():
        raise CheckpointError(f"no such run directory: {run_dir}")
    held = runs_inside(run_dir)
    if held:
        raise CheckpointError(held)
    avg_dir = run_dir / "checkpoints" / AVG_DIR
    try:
        index = read_index(run_dir)
    except ValueError as err:  # JSONDecodeError / UnicodeDecodeError
        raise CheckpointError(f"{avg_dir / INDEX} cannot be read: {err}") from None
    if index is None:
        raise CheckpointError(f"{run_dir} has no {avg_dir.relative_to(run_dir) / INDEX}: it was "
                              f"trained without callbacks.average, so no epochs were kept to average")
    kept = index.get("kept") or []
    if not kept:
        raise CheckpointError(f"{avg_dir / INDEX} lists no kept epoch (no validation finished)")
    have = [e["epoch"] for e in kept]
    odd = [k for k in epochs or [] if k not in have]
    if odd:
        raise CheckpointError(f"--epochs {' '.join(map(str, odd))}: not kept; the kept epochs "
                              f"are {' '.join(map(str, have))}")
    chosen = [e for e in kept if not epochs or e["epoch"] in epochs]
    missing = [e["file"] for e in chosen if not (avg_dir / e["file"]).is_file()]
    if missing:
        raise CheckpointError(f"{avg_dir / INDEX} lists {', '.join(missing)}, missing from {avg_dir}"
                              + ("" if epochs else "; --epochs can leave it out"))
    # a copy of last.ckpt, else (save_last=false, as gat_cora) of the newest epoch checkpoint
    found = sorted((run_dir / "checkpoints").glob("epoch*.ckpt"), key=lambda q: q.stat().st_mtime)
    last = run_dir / "checkpoints" / "last.ckpt"
    last = last if last.is_file() else found[-1] if found else None
    if last is None:
        raise CheckpointError(f"{run_dir / 'checkpoints'} holds no checkpoint of the run "
                              f"(last.ckpt or epoch*.ckpt): the averaged weights go into a copy of one")
    if (Path(name).name != name or not name.endswith(".ckpt") or name == "last.ckpt"
            or not name.removesuffix(".ckpt").strip(".")):  # .ckpt: a hidden file with no name
        raise CheckpointError(f"--name {name}: a file name ending in .ckpt with a name before it "
                              f"(other than last.ckpt), written in {run_dir / 'checkpoints'}")
    out = run_dir / "checkpoints" / name
    if out.exists():
        raise CheckpointError(f"{out} exists and is not overwritten; give another --name")
    check_folder(f"--name {name}", out)
    return index, kept, chosen, last, out


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="attnflow-average", description=__doc__.split("\n\n")[0])
    p.add_argument("run", type=path_arg, help="a run directory trained with callbacks.average")
    p.add_argument("--epochs", type=int, nargs="+", metavar="K",
                   help="average only these kept epochs (default: all kept)")
    p.add_argument("--name", default=AVERAGED, type=path_arg,
                   help=f"the file name in RUN/checkpoints/ (default {AVERAGED}; never overwritten)")
    args = p.parse_args(argv)
    run_dir = Path(args.run)
    try:
        index, kept, chosen, last, out = plan(run_dir, args.epochs, args.name)
        from attnflow.training.averaging import average_into  # torch and Lightning: after every check

        record = average_into(run_dir, index, chosen, last, out)
    except (CheckpointError, InputError, OSError, ValueError) as err:  # OSError: a full disk
        print(f"attnflow-average: {err}", file=sys.stderr)
        return 2
    _print(kept, record)
    return 0


def _print(kept: list, record: dict) -> None:
    table = Table(title=f"kept: {record['by']} {record['n']}")
    for col in ("epoch", "step", record.get("monitor") or "score", "averaged"):
        table.add_column(col, justify="right")
    for e in kept:
        score = "—" if e.get("score") is None else f"{e['score']:.4g}"
        table.add_row(str(e["epoch"]), str(e["step"]), score,
                      "yes" if e["epoch"] in record["epochs"] else "")
    Console().print(table)
    print(f"attnflow-average: the mean of epochs {', '.join(map(str, record['epochs']))} written to "
          f"{record['path']}\n  evaluate it: {command('attnflow-eval', str(record['path']), split='val')}",
          file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
