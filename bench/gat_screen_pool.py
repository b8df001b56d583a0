"""Many seeds of several bench/gat_screens.py variants at once, in parallel worker processes, for
validation differences smaller than four or eight seeds can show (docs/benchmarks.md, "Cora ≥
84.0": a mean over four seeds moves in steps of 0.05 and its seed noise is ≈ 0.3).

Each ``--spec NAME=ARGS`` is a gat_screens.py command line (its options, e.g. ``preg=--variant preg
--weight 0.6 --preg-adj gcn``). The tasks run seed by seed (every spec's seed s before any spec's
seed s + 1), so a run cut short by ``--deadline`` leaves every spec with nearly the same seeds.
Each finished run is appended to ``OUT/runs.jsonl`` at once; at the end a table gives each spec's
validation mean and its mean difference from the first spec over the seeds both finished (paired:
the same seed draws the same initial weights) with that difference's standard error. Test
accuracy is neither computed into the table nor written unless ``--test`` is given (selection
uses validation only).

    python bench/gat_screen_pool.py --seeds 100-163 --devices cuda:8,cpu:6 --deadline 420 --out /tmp/pool \\
        --spec "preg=--variant preg --weight 0.6 --preg-adj gcn" \\
        --spec "preg+dropedge=--variant preg --weight 0.6 --preg-adj gcn --drop-edge 0.2"
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import shlex
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

_D, _DEVICE = None, None  # each worker's device and graph, loaded once


def _init(devices: list[str], counter):
    global _D, _DEVICE
    import torch

    import gat_screens

    with counter.get_lock():  # the i-th worker started takes the i-th device of the list
        _DEVICE = devices[counter.value % len(devices)]
        counter.value += 1
    torch.set_num_threads(1)
    _D = gat_screens.load_cora(_DEVICE)


def _task(job):
    name, argv, seed, stop_at, test = job
    if time.time() > stop_at:
        return None
    import gat_screens

    args = gat_screens.parse(gat_screens.build_parser(), shlex.split(argv) + ["--device", _DEVICE])
    run = gat_screens.run_seed(seed, _D, args)
    row = {"spec": name, "seed": seed, "val_acc": run["val_acc"], "epochs": run["epochs"],
           "seconds": round(run["seconds"], 2), "device": _DEVICE}
    if test:
        row["test_acc"] = run["test_acc"]
    return row


def device_list(text: str) -> list[str]:
    """``cuda:8,cpu:6``: 8 workers on the GPU, 6 on the CPU (one thread each); ``cpu``: every one."""
    out = []
    for part in text.split(","):
        name, _, count = part.partition(":")
        if name not in ("cpu", "cuda") or (count and not count.isdigit()):
            raise argparse.ArgumentTypeError(f"--devices takes cpu, cuda or e.g. cuda:8,cpu:6; got {text!r}")
        out += [name] * int(count or 1)
    return out


def seed_list(text: str) -> list[int]:
    """``100-163`` or ``100,105,110``."""
    if "-" in text:
        lo, hi = map(int, text.split("-"))
        return list(range(lo, hi + 1))
    return [int(t) for t in text.split(",")]


def summary(rows: list[dict], names: list[str]) -> list[dict]:
    """Per spec: runs, val mean, and the paired difference from the first spec (mean, s.e.)."""
    by = {n: {r["seed"]: r for r in rows if r["spec"] == n} for n in names}
    base, table = by[names[0]], []
    for n in names:
        runs = by[n]
        if not runs:
            table.append({"spec": n, "runs": 0})
            continue
        common = sorted(set(runs) & set(base))
        diffs = [runs[s]["val_acc"] - base[s]["val_acc"] for s in common]
        table.append({
            "spec": n, "runs": len(runs), "val_mean": statistics.mean(r["val_acc"] for r in runs.values()),
            "paired_seeds": len(common),
            "diff": statistics.mean(diffs) if diffs else None,
            "diff_se": statistics.stdev(diffs) / math.sqrt(len(diffs)) if len(diffs) > 1 else None,
            "epochs": statistics.mean(r["epochs"] for r in runs.values()),
            "seconds": statistics.mean(r["seconds"] for r in runs.values())})
    return table


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--spec", action="append", required=True, metavar="NAME=ARGS",
                    help="a variant: its name and gat_screens.py options; the first is the reference")
    ap.add_argument("--seeds", type=seed_list, default=seed_list("100-131"), help="e.g. 100-163 (selection seeds)")
    ap.add_argument("--devices", type=device_list, default=device_list("cpu:2"),
                    help="workers and their devices, e.g. cuda:8,cpu:6 (cuda: the one GPU, shared)")
    ap.add_argument("--deadline", type=float, default=None, help="seconds after which no run starts")
    ap.add_argument("--test", action="store_true", help="also write test accuracy (reporting only)")
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results" / "gat_screen_pool"))
    args = ap.parse_args()
    specs = []
    for text in args.spec:
        name, sep, argv = text.partition("=")
        if not sep or not name:
            ap.error(f"--spec takes NAME=ARGS, got {text!r}")
        import gat_screens  # refuse a bad spec before any work, naming it

        try:
            gat_screens.parse(gat_screens.build_parser(), shlex.split(argv))
        except SystemExit:
            ap.error(f"--spec {name!r}: gat_screens.py refuses its options {argv!r} (above)")
        specs.append((name, argv))
    if len({n for n, _ in specs}) != len(specs):
        ap.error("--spec names must differ")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    log = out / "runs.jsonl"
    stop_at = time.time() + args.deadline if args.deadline else float("inf")
    jobs = [(n, a, s, stop_at, args.test) for s in args.seeds for n, a in specs]
    rows, start = [], time.time()
    ctx = mp.get_context("spawn")  # CUDA in the workers needs spawn
    counter = ctx.Value("i", 0)
    with ctx.Pool(len(args.devices), initializer=_init, initargs=(args.devices, counter)) as pool, \
            log.open("a") as f:
        for row in pool.imap_unordered(_task, jobs):
            if row is None:
                continue
            rows.append(row)
            f.write(json.dumps(row) + "\n")
            f.flush()
            print(f"{time.time() - start:6.0f} s  {row['spec']:<24} seed {row['seed']}: val {row['val_acc']:.1f} "
                  f"({row['epochs']} epochs, {row['seconds']:.1f} s, {row['device']})", flush=True)
    names = [n for n, _ in specs]
    table = summary(rows, names)
    print(f"\n{'spec':<24} {'runs':>5} {'val mean':>9} {'Δ vs ' + names[0]:>16} {'s.e.':>6} {'epochs':>7} {'s/run':>6}")
    for t in table:
        if not t["runs"]:
            print(f"{t['spec']:<24} {0:>5}")
            continue
        diff = "" if t["diff"] is None else f"{t['diff']:+.2f} ({t['paired_seeds']})"
        se = "" if t["diff_se"] is None else f"{t['diff_se']:.2f}"
        print(f"{t['spec']:<24} {t['runs']:>5} {t['val_mean']:>9.2f} {diff:>16} {se:>6} {t['epochs']:>7.0f} {t['seconds']:>6.1f}")
    (out / "summary.json").write_text(json.dumps({
        "command": " ".join(shlex.quote(a) for a in ["python", *sys.argv]), "specs": dict(specs),
        "wall_seconds": time.time() - start, "table": table}, indent=2))


if __name__ == "__main__":
    main()
