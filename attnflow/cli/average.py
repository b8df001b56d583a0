"""attnflow-average: the averaged checkpoint of a run that stopped before its fit ended.

    attnflow-average RUN                      # the kept epochs → RUN/checkpoints/averaged.ckpt
    attnflow-average RUN --epochs 3 4 5       # some of them
    attnflow-average RUN --epochs 3 4 5 --name avg-345.ckpt   # RUN/checkpoints/avg-345.ckpt
    attnflow-eval RUN/checkpoints/averaged.ckpt split=val     # then evaluate or translate with it
    attnflow-translate RUN/checkpoints/averaged.ckpt "Ein Mann schläft."

A run trained with ``callbacks.average`` keeps, in ``checkpoints/avg/``, the weights of the epochs
that can still be part of its average (``kept.json`` lists them: epoch, step, score), and writes
``checkpoints/averaged.ckpt`` when the fit ends (:mod:`attnflow.training.averaging`). A run killed or
stopped by hand before that still has the files; this command writes the same checkpoint from
them — the mean θ̄ = (1/N) Σ_k θ_k of the kept epochs' weights in a copy of ``last.ckpt`` (of the
newest ``epoch*.ckpt`` in a run trained with ``save_last: false``, as ``gat_cora``) — so a
stopped run can be evaluated as a finished one would have been. ``--epochs`` averages a subset
(choose it on validation scores, which the table shows, never on a test split).

Every problem is a message naming the file or the epoch and exit status 2, before anything is
written: RUN that is a file (a checkpoint) or a sweep folder (its jobs are named), no
``kept.json`` (a run trained without ``callbacks.average``), a ``kept.json`` entry without what
averaging reads (a file edited by hand), a file to average missing (``--epochs`` can
leave it out), an epoch that is not kept or is named twice, no checkpoint of the run, a
``--name`` that is not a plain ``<name>.ckpt`` file name (a folder in it, nothing before
``.ckpt``), or an output that exists (never overwritten: a finished run's ``averaged.ckpt`` is its
reported model). The file goes beside the run's other checkpoints, where attnflow-eval, -translate
and -predict find the run's saved tokenizer or vocabulary. Nothing else is written.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import List, Optional

from attnflow.io.checkpoints import AVERAGED, AVG_DIR, INDEX, CheckpointError, read_index, runs_inside
from attnflow.io.text import path_arg


def plan(run_dir: Path, epochs: Optional[List[int]], name: str = AVERAGED) -> tuple:
    """(``kept.json``, its kept entries, those to average, ``last.ckpt``, the output path) after
    every check;
    :class:`CheckpointError` naming what is wrong otherwise."""
    if run_dir.is_file():  # (was "no such run directory" of a checkpoint that is there)
        raise CheckpointError(f"{run_dir} is a file, not a run directory: name the run's folder "
                              f"(for a checkpoint, the folder above checkpoints/)")
    if not run_dir.is_dir():
        raise CheckpointError(f"no such run directory: {run_dir}")
    held = runs_inside(run_dir)
    if held:  # (was "trained without callbacks.average" of a sweep folder)
        raise CheckpointError(held)
    avg_dir = run_dir / "checkpoints" / AVG_DIR
    try:
        index = read_index(run_dir)
    except ValueError as err:  # JSONDecodeError / UnicodeDecodeError
        raise CheckpointError(f"{avg_dir / INDEX} cannot be read: {err}") from None
    if index is None:
        raise CheckpointError(f"{run_dir} has no {avg_dir.relative_to(run_dir) / INDEX}: it was "
                              f"trained without callbacks.average, so no epochs were kept to average")
    kept = _kept_entries(index, avg_dir / INDEX)
    chosen = kept
    if epochs:
        twice = sorted({k for k in epochs if epochs.count(k) > 1})
        if twice:  # (each kept epoch is averaged once: a repeat does not weigh it more)
            raise CheckpointError(f"--epochs {' '.join(map(str, twice))}: named more than once; "
                                  f"name each epoch to average once")
        have = [e["epoch"] for e in kept]
        odd = [k for k in epochs if k not in have]
        if odd:
            raise CheckpointError(f"--epochs {' '.join(map(str, odd))}: not kept; the kept epochs "
                                  f"are {' '.join(map(str, have))}")
        chosen = [e for e in kept if e["epoch"] in epochs]
    missing = [e["file"] for e in chosen if not (avg_dir / e["file"]).is_file()]
    if missing:
        raise CheckpointError(f"{avg_dir / INDEX} lists {', '.join(missing)}, missing from {avg_dir}"
                              + ("" if epochs else "; --epochs can leave it out"))
    # the averaged weights go into a copy of a checkpoint of the run: last.ckpt, else (a run
    # trained with save_last=false, as gat_cora) its newest epoch checkpoint, as the callback does
    found = sorted((run_dir / "checkpoints").glob("epoch*.ckpt"), key=lambda q: q.stat().st_mtime)
    last = run_dir / "checkpoints" / "last.ckpt"
    if not last.is_file():
        if not found:
            raise CheckpointError(f"{run_dir / 'checkpoints'} holds no checkpoint of the run "
                                  f"(last.ckpt or epoch*.ckpt): the averaged weights go into a copy "
                                  f"of one")
        last = found[-1]
    if (Path(name).name != name or not name.endswith(".ckpt") or name == "last.ckpt"
            or not name.removesuffix(".ckpt").strip(".")):  # .ckpt: a hidden file with no name
        raise CheckpointError(f"--name {name}: a file name ending in .ckpt with a name before it "
                              f"(other than last.ckpt), written in {run_dir / 'checkpoints'}")
    out = run_dir / "checkpoints" / name
    if out.exists():
        raise CheckpointError(f"{out} exists and is not overwritten; give another --name")
    return index, kept, chosen, last, out


def _kept_entries(index: object, path: Path) -> list:
    """The kept entries of ``index`` (``path``'s content), each checked for what averaging reads
    — a mapping with an int ``epoch`` and ``step``, a number or null ``score`` and a plain
    ``file`` name in the same folder — and the index's ``by``/``n``; a :class:`CheckpointError`
    naming the entry and the field otherwise (a file edited by hand, or not attnflow's)."""
    if not isinstance(index, dict) or index.get("by") not in ("last", "best") \
            or isinstance(index.get("n"), bool) or not isinstance(index.get("n"), int):
        raise CheckpointError(f"{path} is not a kept-epochs index: it needs 'by' (last|best), "
                              f"'n' (an int) and 'kept' (a list)")
    kept = index.get("kept") or []
    if not isinstance(kept, list):
        raise CheckpointError(f"{path}: 'kept' must be a list of entries, got {type(kept).__name__}")
    if not kept:
        raise CheckpointError(f"{path} lists no kept epoch (no validation finished)")
    for i, e in enumerate(kept):
        ok = isinstance(e, dict)
        bad = [] if ok else ["an entry must be a mapping"]
        if ok:
            bad = [f"'{k}' must be an int" for k in ("epoch", "step")
                   if isinstance(e.get(k), bool) or not isinstance(e.get(k), int)]
            score = e.get("score")
            if score is not None and (isinstance(score, bool) or not isinstance(score, (int, float))):
                bad.append("'score' must be a number or null")
            f = e.get("file")
            if not isinstance(f, str) or not f or Path(f).name != f:
                bad.append("'file' must be a file name in the same folder")
        if bad:
            raise CheckpointError(f"{path}: kept entry {i} ({e!r}): {'; '.join(bad)}")
    return kept


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
    except (CheckpointError, ValueError) as err:
        print(f"attnflow-average: {err}", file=sys.stderr)
        return 2
    _print(kept, record)
    return 0


def _print(kept: list, record: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"kept: {record['by']} {record['n']}")
    for col in ("epoch", "step", record.get("monitor") or "score", "averaged"):
        table.add_column(col, justify="right")
    for e in kept:
        score = "—" if e.get("score") is None else f"{e['score']:.4g}"
        table.add_row(str(e["epoch"]), str(e["step"]), score,
                      "yes" if e["epoch"] in record["epochs"] else "")
    Console().print(table)
    print(f"attnflow-average: the mean of epochs {', '.join(map(str, record['epochs']))} written to "
          f"{record['path']}\n  evaluate it: attnflow-eval {record['path']} split=val", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
