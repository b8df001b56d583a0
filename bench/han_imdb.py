"""HAN and the structured self-attentive model on IMDB polarity: dev accuracy, time, documents/s.

Trains each model with ``attnflow.training.run.train`` from its experiment (``han_imdb``,
``self_attentive_imdb``) on the IMDB training split, selects the best epoch on dev (the
checkpoint callback monitors val/acc; there is no test split here) and reports:

- best dev accuracy and macro-F1 (of the selected checkpoint);
- wall time per epoch (fit time / epochs, validation included) and training documents/s;
- anchors on the IMDB *test* split from the literature: Maas et al. 2011 88.9 %, NB-SVM bigrams
  (Wang & Manning 2012) 91.2 % (not directly comparable: ours are dev figures).

Prints a table and writes JSON to ``bench/results/han_imdb.json`` (or ``--out``). Not in CI.

Usage::

    python bench/han_imdb.py                                   # full: all of train, 3 epochs
    python bench/han_imdb.py --limit-train 2000 --epochs 1     # shortened
    python bench/han_imdb.py --models han --override trainer.max_time=00:00:30:00
    python bench/han_imdb.py --models han --experiment han_imdb_best --seed 1 --val-every 0.5
"""

from __future__ import annotations

import argparse
import csv
import datetime as _dt
import json
import os
import platform
import sys
import time
from pathlib import Path

import torch
from hydra import compose, initialize_config_dir

from attnflow import config_dir
from attnflow.config.groups import field_overrides
from attnflow.training.run import train

ROOT = Path(__file__).resolve().parent.parent
EXPERIMENTS = {"han": "han_imdb", "self_attentive": "self_attentive_imdb"}
ANCHORS = {"Maas et al. 2011 (test)": 0.889, "NB-SVM bigrams, Wang & Manning 2012 (test)": 0.912}


def _epoch_curve(run_dir: Path):
    files = sorted(run_dir.glob("csv/version_*/metrics.csv"))
    curve = []
    if files:
        with open(files[-1]) as f:
            for row in csv.DictReader(f):
                if row.get("val/acc"):
                    curve.append(round(float(row["val/acc"]), 4))
    return curve


def run_one(model: str, args) -> dict:
    run_dir = Path(args.runs) / f"{model}-{_dt.datetime.now():%Y%m%d-%H%M%S}-{os.getpid()}"  # unique per process
    overrides = [f"experiment={args.experiment or EXPERIMENTS[model]}", f"trainer.max_epochs={args.epochs}",
                 f"data.limit_train={args.limit_train}", f"data.limit_val={args.limit_val}",
                 "callbacks.progress_bar=none", "logger=csv", *args.override]
    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
        cfg = compose("train", overrides=field_overrides(overrides, config_dir()))
    start = time.time()
    summary = train(cfg, run_dir)
    wall = time.time() - start
    n_train = args.limit_train or 22500
    batch = int(cfg.data.batch_size)
    steps_per_epoch = -(-n_train // batch)
    seen = summary["global_step"] / steps_per_epoch * n_train  # training documents processed
    docs_per_s = seen / summary["fit_seconds"]  # validation passes included in the fit time
    return {
        "model": model, "overrides": overrides, "run_dir": str(run_dir),
        "dev_acc": summary["metrics"].get("best/val/acc"), "dev_f1": summary["metrics"].get("best/val/f1"),
        "dev_acc_per_validation": _epoch_curve(run_dir), "epochs_seen": round(seen / n_train, 2),
        "global_step": summary["global_step"], "fit_seconds": summary["fit_seconds"],
        "seconds_per_epoch": round(n_train / docs_per_s, 1), "train_docs_per_second": round(docs_per_s, 1),
        "wall_seconds": round(wall, 1), "parameters": summary["parameters"], "n_train": n_train,
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="han,self_attentive")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--limit-train", type=int, default=0, help="0 = all 22,500 training documents")
    p.add_argument("--limit-val", type=int, default=0, help="0 = all 2,500 dev documents")
    p.add_argument("--max-minutes", type=float, default=0, help="stop each training after this long "
                   "(trainer.max_time; 0 = no limit)")
    p.add_argument("--val-every", type=float, default=1.0, help="trainer.val_check_interval (fraction of an epoch)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (1 is fastest on a busy 2-core CPU)")
    p.add_argument("--experiment", default="", help="the experiment to train (default: the model's, "
                   "han_imdb or self_attentive_imdb), e.g. han_imdb_best; use with one model")
    p.add_argument("--seed", type=int, default=None, help="the run's seed (default: the config's, 1234)")
    p.add_argument("--override", action="append", default=[], help="extra Hydra override")
    p.add_argument("--runs", default=str(ROOT / "bench" / "results" / "han_imdb_runs"))
    p.add_argument("--out", default=str(ROOT / "bench" / "results" / "han_imdb.json"))
    args = p.parse_args(argv)
    if args.experiment and "," in args.models:
        p.error("--experiment names one experiment: use it with one model (--models han)")
    torch.set_num_threads(args.threads)
    if args.max_minutes > 0:
        m = int(args.max_minutes)
        s = int(round((args.max_minutes - m) * 60))
        args.override = [f"trainer.max_time=00:{m // 60:02d}:{m % 60:02d}:{s:02d}", *args.override]
    if args.seed is not None:
        args.override = [f"seed={args.seed}", *args.override]
    if args.val_every != 1.0:
        args.override = [f"+trainer.val_check_interval={args.val_every}", *args.override]
    load_before = os.getloadavg()
    results = [run_one(m, args) for m in args.models.split(",")]
    print(f"\n{'model':<16}{'dev acc':>9}{'dev F1':>9}{'epochs':>8}{'s/epoch':>10}{'docs/s':>9}  dev acc per validation")
    for r in results:
        print(f"{r['model']:<16}{r['dev_acc']:>9.4f}{r['dev_f1']:>9.4f}{r['epochs_seen']:>8}"
              f"{r['seconds_per_epoch']:>10.1f}{r['train_docs_per_second']:>9.1f}  {r['dev_acc_per_validation']}")
    for name, acc in ANCHORS.items():
        print(f"anchor: {name}: {acc:.3f}")
    out = {"date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
           "command": " ".join([Path(sys.argv[0]).name, *(argv if argv is not None else sys.argv[1:])]),
           "machine": f"{platform.machine()}, {torch.get_num_threads()} torch threads, torch {torch.__version__}",
           "load_average_before": [round(x, 2) for x in load_before],
           "load_average_after": [round(x, 2) for x in os.getloadavg()],
           "results": results, "anchors": ANCHORS}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
