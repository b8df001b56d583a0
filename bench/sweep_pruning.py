"""Pruning in an Optuna sweep: ``hparams_search=gat_cora_optuna`` (24 TPE trials, seed 0) with its
median pruner and with ``hydra/sweeper/pruner=none``, one after the other on one thread each.
Per sweep: trials complete and pruned, the training epochs of all trials (``metrics.json``'s
``epochs``), the sweep's wall time, and the study's best validation accuracy (complete trials).

    python bench/sweep_pruning.py                    # both sweeps (~ 30 minutes on one CPU core)
    python bench/sweep_pruning.py --trials 8         # a quicker look
    python bench/sweep_pruning.py --keep runs/ hydra.sweeper.pruner.n_warmup_steps=10   # other settings

Writes bench/results/sweep_pruning.json and prints a table; the figures are epochs and wall time
of the pruned sweep against the unpruned one.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TRAIN = str(Path(sys.executable).with_name("attnflow-train"))


def sweep(folder: Path, trials: int, seed: int, *extra: str) -> dict:
    """One sweep in ``folder``: its figures."""
    import optuna

    start = time.time()
    subprocess.run([TRAIN, "hparams_search=gat_cora_optuna", f"hydra.sweeper.n_trials={trials}",
                    f"seed={seed}", "callbacks.progress_bar=none", "logger=csv",
                    "callbacks.attention_maps=null", "task.picture=false", f"hydra.sweep.dir={folder}",
                    *extra], check=True, env=dict(os.environ, OMP_NUM_THREADS="1"),
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.time() - start
    study = optuna.load_study(study_name="gat_cora_optuna", storage=f"sqlite:///{folder}/optuna.db")
    states = [t.state.name for t in study.trials]
    runs = [json.loads(p.read_text()) for p in folder.glob("[0-9]*/metrics.json")]
    return {"trials": len(states), "complete": states.count("COMPLETE"), "pruned": states.count("PRUNED"),
            "epochs": sum(r["epochs"] for r in runs), "wall_s": round(wall, 1),
            "fit_s": round(sum(r["fit_seconds"] for r in runs), 1),
            "best_val_acc": study.best_value, "best_trial": study.best_trial.number}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=24)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "sweep_pruning.json"))
    parser.add_argument("--keep", help="keep both sweep folders here (else a temporary folder)")
    parser.add_argument("overrides", nargs="*", help="more overrides of the pruned sweep")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(args.keep or tmp)
        found = {"median pruner": sweep(root / "pruned", args.trials, args.seed, *args.overrides),
                 "no pruner": sweep(root / "full", args.trials, args.seed, "hydra/sweeper/pruner=none")}
    pruned, full = found["median pruner"], found["no pruner"]
    found["ratio"] = {"epochs": round(pruned["epochs"] / full["epochs"], 3),
                      "wall": round(pruned["wall_s"] / full["wall_s"], 3),
                      "best_val_acc_points": round(100 * (pruned["best_val_acc"] - full["best_val_acc"]), 2)}
    print(f"{'sweep':14} {'trials':>6} {'complete':>8} {'pruned':>6} {'epochs':>7} {'wall s':>7} {'best val acc':>12}")
    for name in ("median pruner", "no pruner"):
        r = found[name]
        print(f"{name:14} {r['trials']:6} {r['complete']:8} {r['pruned']:6} {r['epochs']:7} "
              f"{r['wall_s']:7.0f} {r['best_val_acc']:12.4f}")
    print(f"pruned / unpruned: epochs {found['ratio']['epochs']}, wall {found['ratio']['wall']}; "
          f"best val acc {found['ratio']['best_val_acc_points']:+.2f} points")
    Path(args.out).write_text(json.dumps({**found, "trials": args.trials, "seed": args.seed,
                                          "overrides": args.overrides}, indent=2))


if __name__ == "__main__":
    main()
