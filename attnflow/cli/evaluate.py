"""attnflow-eval: evaluate a trained run on a split, or on another data set of the same kind.

    attnflow-eval RUN                                  # its test split (val for runs without one)
    attnflow-eval RUN data.test=test_2017_flickr       # Multi30k: another test set
    attnflow-eval RUN data.name=planetoid data.dataset=Cora   # another graph data module
    attnflow-eval RUN/checkpoints/last.ckpt task.beam_size=8 -o metrics.json

RUN is a run directory (its best checkpoint by ``metrics.json``, else ``last.ckpt``) or a
checkpoint file. Nothing is trained: data, model and task are rebuilt from the config stored in the
checkpoint with the overrides applied, and Lightning's ``Trainer.validate`` or ``Trainer.test``
computes the task's metrics. Of the training data only what the run saved is read (tokenizers,
vocabulary); ``data.name`` picks another data module of the same kind (fields from
``conf/data/<name>.yaml``). Overrides: ``split=val|test``, ``data.<field>``, ``task.<field>``,
``seed`` and the ``trainer.*`` fields of :data:`TRAINER_FIELDS`; an unknown one is an error.

The metrics are printed and written as JSON to ``<run dir>/eval/<split>-<YYYYmmdd-HHMMSS>.json``
or ``-o FILE``; an existing file is never overwritten, and a second attnflow-eval writing the
same ``-o FILE`` is refused at once (``.FILE.lock`` beside it), not after its work.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
from datetime import datetime
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from rich.console import Console
from rich.table import Table

from attnflow.cli.tool import run_tool
from attnflow.config.registry import ConfigError
from attnflow.inference.evaluate import USAGE, apply_overrides, evaluate_run, parse_overrides
from attnflow.io.checkpoints import Run, load_run
from attnflow.io.text import check_folder, check_new_outputs, path_arg
from attnflow.training.runlock import writing


def output_path(run: Run, split: str, out: Optional[str]) -> Path:
    """Where the metrics go: ``-o`` (checked, and locked, by :func:`evaluate`), else a new name
    in ``<run dir>/eval``."""
    if out:
        return Path(out)
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    path = run.run_dir / "eval" / f"{split}-{stamp}.json"
    check_folder(f"without -o the metrics go to {path}", path,
                 "move that file away, or name the output with -o FILE")
    n = 1
    while path.exists():
        n += 1
        path = run.run_dir / "eval" / f"{split}-{stamp}-{n}.json"
    return path


def _write_new(path: Path, data: dict) -> None:
    """Write ``data`` as JSON to ``path``, which must not exist (a link from a finished temporary
    file: atomic, and it fails on an existing name)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
        os.link(tmp, path)
    except FileExistsError:
        raise ConfigError(f"{path} appeared while evaluating; it is not overwritten") from None
    finally:
        tmp.unlink(missing_ok=True)


def evaluate(target: Path | str, overrides: List[str] = (), out: Optional[str] = None,
             device: str = "cpu") -> Tuple[Dict[str, Any], Path]:
    """Evaluate a run; returns (the written summary, its path)."""
    pairs = parse_overrides(list(overrides))
    with contextlib.ExitStack() as held:
        if out:  # a second writer of the same file is refused before any work
            check_new_outputs(("-o", out))
            held.enter_context(writing(out, f"-o {out}"))
            check_new_outputs(("-o", out))  # (written by the holder it waited behind)
        run = load_run(target, device)
        cfg, split, trainer_fields = apply_overrides(run, pairs)
        path = output_path(run, split, out)
        summary = evaluate_run(run, cfg, split, trainer_fields, list(overrides), device)
        _write_new(path, summary)
        return summary, path


def print_metrics(summary: Dict[str, Any], path: Path) -> None:
    table = Table(title=f"{summary['split']} metrics", caption=summary["checkpoint"])
    table.add_column("metric")
    table.add_column("value", justify="right")
    for k, v in sorted(summary["metrics"].items()):
        table.add_row(k, f"{v:.6g}")
    Console().print(table)
    print(f"attnflow-eval: written to {path}", file=sys.stderr)


def _evaluate(args) -> int:
    quiet = logging.getLogger("pytorch_lightning")
    level = quiet.level
    quiet.setLevel(logging.WARNING)  # Lightning's "GPU available: …" lines
    try:
        summary, path = evaluate(args.run, args.overrides, args.output, args.device)
    finally:
        quiet.setLevel(level)
    print_metrics(summary, path)
    return 0


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="attnflow-eval", description=__doc__.split("\n\n")[0],
                                epilog=f"overrides: {USAGE}")
    p.add_argument("run", type=path_arg, help="a run directory or a .ckpt file")
    p.add_argument("overrides", nargs="*", help="key=value (see below)")
    p.add_argument("-o", "--output", type=path_arg, help="write the metrics JSON here (never overwritten)")
    p.add_argument("--device", default="cpu", help="the accelerator (default cpu)")
    return run_tool(p, argv, _evaluate, (OSError, ValueError),  # ConfigError: a ValueError
                    lambda err: f"{'config error: ' if type(err) is ConfigError else ''}{err}")


if __name__ == "__main__":
    sys.exit(main())
