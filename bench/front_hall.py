"""The front hall's figures for a checkout: how often one run composes its config, validates each
block config and reads each checkpoint; the code lines of cli/ + config/ + training/; imports made
inside functions; hooks looked up by name; and the time of ``attnflow-train --help``.

    python bench/front_hall.py                          # this checkout
    python bench/front_hall.py --root ../old --out /tmp/old.json

Each run happens in a fresh interpreter with ``--root`` first on ``PYTHONPATH``, counted by
wrapping Hydra's ``ConfigLoaderImpl.load_configuration``, the check of a block config in
attnflow's ``Registry`` (``_check``, behind ``validate``'s memo, where it has one) and the reads
of a checkpoint (``attnflow.io.checkpoints.read_checkpoint``, or ``torch.load`` of a file
outside it). The run: the default experiment cut to 2 steps on 16 sequences; the resume
continues it to 4 steps. The static counts read the package's source with ``ast``.
"""

from __future__ import annotations

import argparse
import ast
import glob
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import tokenize
from pathlib import Path

FRONT_HALL = ("cli", "config", "training")
RUN = ["trainer.max_steps=2", "trainer.limit_val_batches=1", "trainer.limit_test_batches=1",
       "trainer.val_check_interval=1", "logger=none", "data.train_size=16", "data.val_size=8",
       "data.test_size=8", "data.batch_size=8"]
COUNTING = r"""
import collections, json, os, sys, atexit
import torch
from hydra._internal.config_loader_impl import ConfigLoaderImpl
from attnflow.config.registry import Registry
counts = collections.Counter()
def wrap(owner, name, key):
    original = getattr(owner, name)
    def counted(*args, **kwargs):
        counts[key(args, kwargs)] += 1
        return original(*args, **kwargs)
    setattr(owner, name, counted)
wrap(ConfigLoaderImpl, "load_configuration", lambda a, k: "compositions")
# a block config's check (Registry._check where validate keeps a memo of checked configs)
wrap(Registry, "_check" if hasattr(Registry, "_check") else "validate", lambda a, k: "validate " + a[0].kind)
import attnflow.io.checkpoints as checkpoints
inside = []  # a checkpoint read: attnflow's reader, or torch.load of a path outside it
def read(original):
    def counted(f, *args, **kwargs):
        if not inside and isinstance(f, (str, os.PathLike)):
            counts["read " + os.path.basename(str(f))] += 1
        inside.append(f)
        try:
            return original(f, *args, **kwargs)
        finally:
            inside.pop()
    return counted
checkpoints.read_checkpoint = read(checkpoints.read_checkpoint)
torch.load = read(torch.load)
atexit.register(lambda: open(os.environ["COUNTS"], "w").write(json.dumps(counts)))
from attnflow.cli.train import main
sys.argv = ["attnflow-train", *sys.argv[1:]]
main()
"""


def code_lines(source: str) -> int:
    """Lines holding code: not blank, not only a comment, not a docstring."""
    tree = ast.parse(source)
    docs = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body:
            first = body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                    and isinstance(first.value.value, str):
                docs.update(range(first.lineno, first.end_lineno + 1))
    lines = set()
    skip = (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
            tokenize.ENDMARKER)
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type not in skip:
            lines.update(range(tok.start[0], tok.end[0] + 1))
    return len(lines - docs)


def static_figures(root: Path) -> dict:
    """Code lines of the front hall, function-level imports and getattr/hasattr calls."""
    files = {f: open(f, encoding="utf-8").read() for f in glob.glob(f"{root}/attnflow/**/*.py", recursive=True)}
    front = sum(code_lines(s) for f, s in files.items()
                if Path(f).relative_to(root / "attnflow").parts[0] in FRONT_HALL)
    inner = lookups = 0
    for source in files.values():
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                inner += sum(isinstance(m, (ast.Import, ast.ImportFrom)) for m in ast.walk(node))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                    and node.func.id in ("getattr", "hasattr"):
                lookups += 1
    return {"front hall code lines": front, "function-level imports": inner,
            "getattr/hasattr calls": lookups}


def counted_run(root: Path, argv: list, folder: Path) -> dict:
    """What one ``attnflow-train argv`` composed, validated and read, by kind."""
    env = dict(os.environ, PYTHONPATH=str(root), COUNTS=str(folder / "counts.json"),
               ATTNFLOW_OUTPUT_DIR=str(folder / "outputs"))
    done = subprocess.run([sys.executable, "-c", COUNTING, *argv], env=env, cwd=folder,
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"attnflow-train {' '.join(argv)} failed:\n{done.stderr[-2000:]}")
    return json.loads((folder / "counts.json").read_text())


def help_seconds(root: Path, repeats: int = 5) -> float:
    env = dict(os.environ, PYTHONPATH=str(root))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "attnflow.cli.train", "--help"], env=env,
                       capture_output=True, check=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent)
    parser.add_argument("--out", type=Path, default=Path("bench/results/front_hall.json"))
    args = parser.parse_args()
    root = args.root.resolve()
    figures = static_figures(root)
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        fresh = counted_run(root, [*RUN, f"hydra.run.dir={run}"], Path(tmp))
        resumed = counted_run(root, [f"resume={run}", "trainer.max_steps=4"], Path(tmp))
    for name, counts in (("run", fresh), ("resume", resumed)):
        figures[f"{name}: Hydra compositions"] = counts.pop("compositions", 0)
        reads = {k[5:]: v for k, v in counts.items() if k.startswith("read ")}
        figures[f"{name}: reads of a checkpoint (most)"] = max(reads.values(), default=0)
        for kind in ("data", "model", "task", "scorer"):
            figures[f"{name}: {kind} validations"] = counts.get(f"validate {kind}", 0)
    figures["attnflow-train --help (s, median of 5)"] = round(help_seconds(root), 3)
    width = max(map(len, figures))
    for name, value in figures.items():
        print(f"{name.ljust(width)}  {value}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"root": str(root), "figures": figures}, indent=1))


if __name__ == "__main__":
    main()
