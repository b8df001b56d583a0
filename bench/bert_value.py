"""The value of pretraining: bert_mini fine-tuned on few IMDB labels, pretrained against from scratch.

Issue 11's study (Devlin et al. 2019 §5 show the gain of pretraining on small GLUE sets; here a
CPU-sized version):

1. pretrain ``experiment=bert_pretrain_imdb`` (bert_mini, MLM + NSP) on the IMDB training texts
   for a time budget on one thread (``--pretrain-minutes``; the step count for the linear decay is
   ``--pretrain-steps``, pick it so that the budget ends near it) — or reuse a run
   (``--pretrained DIR``);
2. fine-tune ``experiment=bert_imdb`` on ``--labelled`` training reviews (a seeded random subset),
   once with ``model.init_from`` = the pretraining run and once from scratch, for every learning
   rate of ``--lrs``; both use the pretraining run's WordPiece tokenizer, so the two differ in the
   initial weights only;
3. with ``--full``, fine-tune the pretrained model on every training review once.

Dev accuracy is that of the best checkpoint on dev (no test split: selection and report on dev,
so the best of the learning rates is slightly optimistic for both arms alike). Each run is a fresh
``attnflow-train`` process with ``OMP_NUM_THREADS`` = ``--threads``; ``--jobs`` runs go at once.
Prints a table and writes JSON to ``bench/results/bert_value-<time>.json``. Not in CI.

Usage::

    python bench/bert_value.py --pretrain-minutes 60 --pretrain-steps 2000 --full
    python bench/bert_value.py --pretrained outputs/<pretraining run> --labelled 1000 --jobs 2
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TRAIN = str(Path(sys.executable).with_name("attnflow-train"))


def attnflow_train(run_dir: Path, overrides: list, threads: int) -> dict:
    """One ``attnflow-train`` run in a fresh process; its metrics.json plus wall time."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    start = time.time()
    log_path = run_dir.parent / f"{run_dir.name}.log"
    with open(log_path, "w") as log:
        code = subprocess.call([TRAIN, *overrides, "logger=csv", "callbacks.progress_bar=text",
                                f"hydra.run.dir={run_dir}"], env=env, stdout=log, stderr=log)
    wall = time.time() - start
    if code:
        raise RuntimeError(f"{run_dir.name} failed (exit {code}); see {log_path}")
    summary = json.loads((run_dir / "metrics.json").read_text())
    return {"run": str(run_dir), "wall_s": round(wall, 1), **summary}


def pretrain(args, out: Path) -> Path:
    run = out / "pretrain"
    attnflow_train(run, ["experiment=bert_pretrain_imdb", f"data.vocab_size={args.vocab}",
                         f"trainer.max_steps={args.pretrain_steps}",
                         "trainer.max_time=00:{:02d}:{:02d}:00".format(*divmod(args.pretrain_minutes, 60)),
                         f"task.optim.lr={args.pretrain_lr}", "task.optim.warmup_steps=200",
                         "trainer.val_check_interval=500", "data.limit_val=512"], args.threads)
    return run


def finetune(args, out: Path, pretrained: Path, arm: str, lr: float, limit: int) -> dict:
    name = f"{arm}-lr{lr:g}-n{limit or 'all'}"
    overrides = ["experiment=bert_imdb", f"data.tokenizer_from={pretrained}",
                 f"data.limit_train={limit}", f"data.max_len={args.max_len}",
                 f"trainer.max_epochs={args.epochs if limit else args.full_epochs}",
                 f"task.optim.lr={lr}", f"task.optim.warmup_steps={args.warmup}",
                 f"data.limit_val={args.limit_val}"]
    if arm == "pretrained":
        overrides.append(f"model.init_from={pretrained}")
    result = attnflow_train(out / name, overrides, args.threads)
    return {"arm": arm, "lr": lr, "labelled": limit or "all",
            "dev_acc": result["metrics"].get("best/val/acc"), "dev_f1": result["metrics"].get("best/val/f1"),
            "epochs": result.get("epochs"), "wall_s": result["wall_s"], "run": result["run"]}


def _commit() -> str:
    try:
        return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "?"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pretrained", help="a pretraining run to reuse (skips step 1)")
    p.add_argument("--pretrain-minutes", type=int, default=60)
    p.add_argument("--pretrain-steps", type=int, default=2000)
    p.add_argument("--pretrain-lr", type=float, default=5e-4)
    p.add_argument("--vocab", type=int, default=8000, help="WordPiece size of the pretraining run")
    p.add_argument("--labelled", type=int, default=1000)
    p.add_argument("--lrs", type=float, nargs="+", default=[1e-4, 5e-4])
    p.add_argument("--epochs", type=int, default=5, help="fine-tuning epochs on the subset")
    p.add_argument("--full", action="store_true", help="also fine-tune on every training review")
    p.add_argument("--full-epochs", type=int, default=1)
    p.add_argument("--full-lr", type=float, default=1e-4)
    p.add_argument("--max-len", type=int, default=128, help="as pretraining: longer positions are untrained")
    p.add_argument("--warmup", type=int, default=16)
    p.add_argument("--limit-val", type=int, default=0, help="dev reviews (0: all 2,500; less only to try the script)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument("--out", default=str(ROOT / "bench" / "results"))
    args = p.parse_args(argv)

    stamp = f"{_dt.datetime.now():%Y%m%d-%H%M%S}"
    out = Path(args.out) / f"bert_value-{stamp}"
    out.mkdir(parents=True)
    pre_start = time.time()
    pretrained = Path(args.pretrained).resolve() if args.pretrained else pretrain(args, out)
    pre = json.loads((pretrained / "metrics.json").read_text())
    pre_info = {"run": str(pretrained), "global_step": pre.get("global_step"),
                "fit_seconds": pre.get("fit_seconds"), "val": pre.get("metrics"),
                "reused": bool(args.pretrained),
                "wall_s": None if args.pretrained else round(time.time() - pre_start, 1)}
    jobs = [("pretrained", args.full_lr, 0)] if args.full else []  # the longest first
    jobs += [("pretrained", lr, args.labelled) for lr in args.lrs]
    jobs += [("scratch", lr, args.labelled) for lr in args.lrs]
    with ThreadPoolExecutor(args.jobs) as pool:
        rows = list(pool.map(lambda j: finetune(args, out, pretrained, *j), jobs))

    print(f"pretraining: {pre_info['global_step']} steps in {pre_info['fit_seconds']} s; "
          f"val {json.dumps(pre_info['val'])}")
    print(f"{'arm':<11} {'lr':>7} {'labelled':>8} {'dev acc':>8} {'dev F1':>7} {'epochs':>6} {'wall s':>7}")
    for r in rows:
        print(f"{r['arm']:<11} {r['lr']:>7g} {str(r['labelled']):>8} {r['dev_acc']:>8.4f} "
              f"{r['dev_f1']:>7.4f} {r['epochs']:>6} {r['wall_s']:>7.0f}")
    sub = [r for r in rows if r["labelled"] == args.labelled]
    best = {arm: max(r["dev_acc"] for r in sub if r["arm"] == arm) for arm in ("pretrained", "scratch")}
    gain = best["pretrained"] - best["scratch"]
    print(f"best dev acc on {args.labelled} labels: pretrained {best['pretrained']:.4f}, "
          f"scratch {best['scratch']:.4f}: gain {100 * gain:+.1f} points (goal >= +5)")
    result = {"date": stamp, "commit": _commit(), "machine": platform.platform(),
              "cpu_count": os.cpu_count(), "threads": args.threads, "jobs": args.jobs,
              "args": vars(args), "pretraining": pre_info, "runs": rows, "best": best,
              "gain_points": round(100 * gain, 2)}
    path = Path(args.out) / f"bert_value-{stamp}.json"
    path.write_text(json.dumps(result, indent=2))
    print(f"written {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
