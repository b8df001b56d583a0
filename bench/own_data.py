"""Each family's main preset on a made-up set of the user's kind, given by its paths only, against
the same model trained to convergence on it (the preset with ``trainer.max_epochs`` raised, no
early stopping, a warm-up of a tenth of the run): the preset's own epoch count and warm-up are
facts of its data set (IMDB, Multi30k), not of the user's.

    python bench/own_data.py                       # every family, this checkout
    python bench/own_data.py --families han --root ../old --out /tmp/old.json

Prints a table (family, preset, converged, preset with paths only) and writes JSON. Each run is
``attnflow-train`` in a fresh interpreter with ``--root`` first on ``PYTHONPATH``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Dict, List, NamedTuple

QUIET = ["callbacks.progress_bar=none", "trainer.accelerator=cpu", "logger=none",
         "callbacks.attention_maps=null"]
TOPICS = {"food": "soup bread cheese pasta salad spice".split(),
          "sport": "goal match team score coach league".split(),
          "tech": "chip code robot laptop screen cloud".split()}
FILLER = "the a was and it very with of this that".split()
PEOPLE, PLACES = "Anna Jonas Mira Tomas Lena Omar".split(), "Paris Oslo Lima Cairo Perth Rome".split()
VERBS = "met saw called visited thanked".split()
SURNAMES = "Berg Costa Dahl Essa Fiore Gould".split()
LEXICON = dict(zip("ka lo mi nu pe ri so tu va xe zo bi".split(),
                   "red cat sees big dog runs a small bird eats the tree".split()))


def _texts(folder: Path, n_train: int = 120, n_val: int = 60, density: float = 0.12) -> None:
    """``train.csv`` and ``dev.csv`` (review, topic): a topic's words (``density`` of the words)
    among filler words."""
    rng = random.Random(0)
    for name, n in (("train", n_train), ("dev", n_val)):
        rows = ["review,topic"]
        for i in range(n):
            topic = list(TOPICS)[i % 3]
            words = [rng.choice(TOPICS[topic]) if rng.random() < density else rng.choice(FILLER)
                     for _ in range(rng.randint(12, 24))]
            rows.append(" ".join(" ".join(words[k:k + 6]) + "." for k in range(0, len(words), 6))
                        + f",{topic}")
        (folder / f"{name}.csv").write_text("\n".join(rows) + "\n", encoding="utf-8")


def _tagged(folder: Path, n_train: int = 48, n_val: int = 40) -> None:
    """``train.conll`` and ``dev.conll``: '<first> <last> <verb> <person> in <place> .' sentences,
    names of two words (B-PER I-PER)."""
    rng = random.Random(1)
    for name, n in (("train", n_train), ("dev", n_val)):
        lines = []
        for _ in range(n):
            a, b = rng.sample(PEOPLE, 2)
            words = [(a, "B-PER"), (rng.choice(SURNAMES), "I-PER"), (rng.choice(VERBS), "O"),
                     (b, "B-PER"), ("in", "O"), (rng.choice(PLACES), "B-LOC"), (".", "O")]
            lines += [f"{w}\t{t}" for w, t in words] + [""]
        (folder / f"{name}.conll").write_text("\n".join(lines), encoding="utf-8")


def _parallel(folder: Path, n_train: int = 400, n_val: int = 40) -> None:
    """``{train,val,test}.{de,en}``: a made-up source language translated word for word."""
    rng = random.Random(2)
    words = list(LEXICON)
    for name, n in (("train", n_train), ("val", n_val), ("test", n_val)):
        src = [[rng.choice(words) for _ in range(rng.randint(3, 7))] for _ in range(n)]
        (folder / f"{name}.de").write_text("".join(" ".join(s) + "\n" for s in src), encoding="utf-8")
        (folder / f"{name}.en").write_text("".join(" ".join(LEXICON[w] for w in s) + "\n"
                                                   for s in src), encoding="utf-8")


def _text_paths(folder: Path) -> List[str]:
    return [f"data.train_path={folder}/train.csv", f"data.val_path={folder}/dev.csv",
            "data.test_path=''", "data.text_field=review", "data.label_field=topic"]


class Family(NamedTuple):
    preset: str
    metric: str
    make: Callable[[Path], None]
    paths: Callable[[Path], List[str]]
    converged: List[str]  # what trains the same model to convergence, beside the paths


FAMILIES: Dict[str, Family] = {
    "han": Family("han_imdb", "val/acc", _texts, _text_paths, ["trainer.max_epochs=30"]),
    "self_attentive": Family("self_attentive_imdb", "val/acc", _texts, _text_paths,
                             ["trainer.max_epochs=40"]),
    "bert": Family("bert_imdb", "val/acc", lambda d: _texts(d, 240, 60, 0.25), _text_paths,
                   ["trainer.max_epochs=40"]),
    "bert_tokens": Family("bert_tokens", "val/f1", _tagged,
                          lambda d: ["data=token_classification", f"data.train_path={d}/train.conll",
                                     f"data.val_path={d}/dev.conll", "data.test_path=''", "test=false"],
                          ["trainer.max_epochs=40"]),
    "transformer": Family("mt_transformer", "val/bleu", _parallel,
                          lambda d: [f"data.root={d}", "data.train=train", "data.val=val", "data.test=test"],
                          ["trainer.max_epochs=60", "task.optim.warmup_steps=42"]),
}


# the families whose two runs take under 2 minutes on a laptop CPU (tests/test_own_data.py); the
# Transformer and BERT from scratch take longer to converge
QUICK = ("han", "self_attentive", "bert_tokens")


def overrides(family: str, folder: Path, converged: bool) -> List[str]:
    """The overrides of one run: the preset and the paths (``converged``: and the long run)."""
    f = FAMILIES[family]
    extra = [*f.converged, "callbacks.early_stopping=null"] if converged else []
    return [f"experiment={f.preset}", *f.paths(folder), *extra, *QUIET]


def make_data(family: str, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    FAMILIES[family].make(folder)
    return folder


def best_metric(run_dir: Path, metric: str) -> Dict[str, float]:
    """The best checkpoint's ``metric`` of a finished run (``best/`` or, before, bare), and
    the epochs it trained."""
    summary = json.loads((run_dir / "metrics.json").read_text())
    metrics = summary["metrics"]
    return {"value": metrics.get(f"best/{metric}", metrics.get(metric)), "epochs": summary["epochs"]}


def _train(root: Path, args: List[str], run_dir: Path) -> Dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(root), "WANDB_MODE": "offline"}
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "attnflow.cli.train", *args, f"hydra.run.dir={run_dir}"],
                   check=True, env=env, cwd=run_dir.parent, stdout=subprocess.DEVNULL)
    return {"seconds": round(time.perf_counter() - start, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--families", nargs="+", default=list(FAMILIES), choices=list(FAMILIES))
    parser.add_argument("--root", default=str(Path(__file__).resolve().parents[1]))
    parser.add_argument("--out", default="bench/results/own_data.json")
    parser.add_argument("--kinds", nargs="+", default=["converged", "paths only"])
    parser.add_argument("--extra", nargs="*", default=[], help="overrides added to every run "
                        "(before this change: data.labels=null, else the preset refuses the labels)")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for family in args.families:
            folder, f = make_data(family, Path(tmp) / family), FAMILIES[family]
            got = {}
            for kind in args.kinds:
                run_dir = Path(tmp) / f"{family}-{kind}"
                took = _train(Path(args.root), [*overrides(family, folder, kind == "converged"),
                                                 *args.extra], run_dir)
                got[kind] = {**best_metric(run_dir, f.metric), **took}
            rows.append({"family": family, "preset": f.preset, "metric": f.metric, **got})
            print(f"{family:15} {f.preset:20} {f.metric:9} " + "  ".join(
                f"{k} {v['value']:.3f} ({v['epochs']} epochs, {v['seconds']} s)" for k, v in got.items()),
                flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"root": args.root, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
