"""Show, Attend and Tell on the synthetic shapes set: BLEU-4 and grounding of several configs.

Issue 12's figures. Each config is a full ``attnflow-train experiment=caption_shapes`` run (5,000
training images, 6 epochs) in a fresh process with ``OMP_NUM_THREADS`` = ``--threads``; ``--jobs``
runs go at once. Reported per config, from the run's metrics.json (best checkpoint by val BLEU):

- BLEU-4 (sacreBLEU, one reference per image) of greedy decoding on val and of beam search
  (beam 3) on the held-out test images (seeds no other split draws);
- grounding: Σ attention on the named shape's cells / Σ their uniform share, over every word that
  names a shape (``attnflow.tasks.captioning_metrics``). The peer is uniform attention, whose
  ratio is exactly 1 (``tests/test_caption_grounding.py`` checks that, and a shuffled control);
- the training time.

Configs: the experiment as shipped (additive scorer, no doubly stochastic regulariser), with Xu et
al.'s regulariser (λ = 1, per target token as their code), and the dot and general scorers.
Prints a table and writes JSON to ``bench/results/caption_shapes-<time>.json``. Not in CI.

Usage::

    python bench/caption_shapes.py --jobs 2 --threads 1
    python bench/caption_shapes.py --configs default reg1 --epochs 2
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bert_value import _commit, attnflow_train  # noqa: E402  (one way to run attnflow-train)

CONFIGS = {
    "default": [],
    "reg1": ["task.attention_reg=1.0"],
    "dot": ["scorer=dot"],
    "general": ["scorer=general"],
}


def run_config(name: str, args, out: Path) -> dict:
    overrides = ["experiment=caption_shapes", f"trainer.max_epochs={args.epochs}", *CONFIGS[name]]
    r = attnflow_train(out / name, overrides, args.threads)
    m = r["metrics"]
    return {"config": name, "overrides": CONFIGS[name], "val_bleu4": m.get("best/val/bleu"),
            "test_bleu4_beam3": m.get("test/bleu"), "val_grounding": m.get("best/val/grounding"),
            "test_grounding": m.get("test/grounding"), "test_grounding_mass": m.get("test/grounding_mass"),
            "test_attention_reg": m.get("test/attention_reg"), "fit_s": r.get("fit_seconds"),
            "wall_s": r["wall_s"], "epochs": r.get("epochs"), "run": r["run"]}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    p.add_argument("--epochs", type=int, default=6)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--out", default=str(Path(__file__).resolve().parent / "results"))
    p.add_argument("--runs-dir", default=None, help="where the runs go (default: a temporary folder)")
    args = p.parse_args(argv)
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    out = Path(args.runs_dir or tempfile.mkdtemp(prefix="caption_shapes-"))
    out.mkdir(parents=True, exist_ok=True)
    with ThreadPoolExecutor(args.jobs) as pool:
        rows = list(pool.map(lambda c: run_config(c, args, out), args.configs))
    head = f"{'config':<10} {'val BLEU-4':>10} {'test BLEU-4 (beam 3)':>21} {'val grounding':>14} " \
           f"{'test grounding':>15} {'fit s':>7}"
    print(head)
    for r in rows:
        print(f"{r['config']:<10} {r['val_bleu4']:>10.2f} {r['test_bleu4_beam3']:>21.2f} "
              f"{r['val_grounding']:>14.2f} {r['test_grounding']:>15.2f} {r['fit_s']:>7.0f}")
    print("uniform attention (the peer): grounding 1.00 by construction")
    result = {"date": stamp, "commit": _commit(), "machine": platform.platform(),
              "cpu_count": os.cpu_count(), "threads": args.threads, "jobs": args.jobs,
              "args": vars(args), "runs": rows}
    path = Path(args.out) / f"caption_shapes-{stamp}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2))
    print(f"written {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
