"""Choose on the val split which kept epochs of a Multi30k run to average and how to decode, then
decode test_2016 once with that choice (issue 13's selection; not a test).

    python bench/mt_select.py RUN_DIR [--averages 1 3 5] [--ensembles 3 5] [--beams 4 5 6 8]
        [--alphas 0.6 0.8 1.0 1.2] [--threads 1] [--test] [--out PATH]

A run trained with ``callbacks.average`` keeps its best (or last) epochs' weights and their val
scores (``checkpoints/avg/kept.json``, :mod:`attnflow.training.averaging`). The per-epoch val BLEU that
chose them is greedy; test decodes with beam search and the GNMT length penalty
((5 + |y|)/6)^α (Wu et al. 2016, eq. 14). So for each N of ``--averages`` the N best kept epochs
by their score are averaged (``checkpoints/avg-epochs-<e1>-<e2>….ckpt``, written once, the same
file attnflow-average writes with ``--epochs``; N = 1 is the best epoch's weights) and the val
split is decoded with every beam × α. For each N of ``--ensembles`` the N best kept epochs decode
as an ensemble instead (the mean of their next-token distributions, :mod:`attnflow.models.ensemble`;
each epoch's weights as ``avg-epochs-<e>.ckpt``; N times the decoding time). The candidate with the highest val BLEU — tokenised lower-cased
(13a) for a lower-cased run (``data.lowercase``), else sacreBLEU — is the choice; with ``--test``
it alone decodes test_2016. Prints the table and writes a JSON file of every figure (default
``<run>/select.json``, never overwritten).

Scoring and decoding are ``bench/mt_multi30k.py``'s ``--evaluate`` path (the translation code
attnflow-translate uses), one model load per average.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import sys
import time
from pathlib import Path


def _averaged(run_dir: Path, epochs: list) -> Path:
    """The checkpoint with the mean weights of ``epochs`` (written by attnflow-average's code the
    first time; reused after, never overwritten)."""
    from attnflow.cli.average import plan
    from attnflow.io.weights import average_into

    name = "avg-epochs-" + "-".join(map(str, sorted(epochs))) + ".ckpt"
    path = run_dir / "checkpoints" / name
    if not path.exists():
        index, _, chosen, last, out = plan(run_dir, epochs, name)
        average_into(run_dir, index, chosen, last, out)
    return path


def _scores(ckpts: list, split: str, decodings: list) -> tuple:
    """([{beam, alpha, sacrebleu, tok_lc_bleu, wer, …}] of ``split`` for each (beam, α), whether
    the run is lower-cased); the model (an ensemble for several checkpoints) is loaded once."""
    from attnflow.inference.translation import load_members

    model, dm, (cfg, *_) = load_members(ckpts)
    rows = decode(model, dm, "+".join(c.name for c in ckpts), split, decodings)
    return rows, bool(cfg["data"].get("lowercase"))


def decode(model, dm, name: str, split: str, decodings: list) -> list:
    """[{beam, alpha, sacrebleu, tok_lc_bleu, wer, …}] of a loaded ``model`` on ``split`` for each
    (beam, α), each printed under ``name`` as it is done."""
    from attnflow.inference.translation import translate
    from mt_multi30k import scores

    src, refs = dm.split_text(split)
    rows = []
    for beam, alpha in decodings:
        start = time.time()
        hyps, _ = translate(model, dm, src, beam=beam, length_penalty=alpha)
        rows.append({"beam": beam, "alpha": alpha, **scores(hyps, refs), "sentences": len(hyps),
                     "seconds": round(time.time() - start, 1)})
        print(f"  {name} {split} beam {beam} α {alpha}: tok-lc {rows[-1]['tok_lc_bleu']:.2f} "
              f"sacreBLEU {rows[-1]['sacrebleu']:.2f}", flush=True)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", help="a translation run directory trained with callbacks.average")
    ap.add_argument("--averages", type=int, nargs="+", default=[1, 3, 5],
                    help="average the N best kept epochs, for each N (default 1 3 5)")
    ap.add_argument("--ensembles", type=int, nargs="*", default=[],
                    help="decode with the N best kept epochs as an ensemble, for each N (≥ 2)")
    ap.add_argument("--beams", type=int, nargs="+", default=[4, 5, 6, 8])
    ap.add_argument("--alphas", type=float, nargs="+", default=[0.6, 0.8, 1.0, 1.2])
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--test", action="store_true", help="decode test_2016 once with the val choice")
    ap.add_argument("--out", help="JSON file (default <run>/select.json; never overwritten)")
    args = ap.parse_args(argv)

    import torch

    from attnflow.training.averaging import read_index, select_kept
    from attnflow.io.checkpoints import CheckpointError
    from attnflow.inference.runs import InferenceError

    if args.threads:
        torch.set_num_threads(args.threads)
    run_dir = Path(args.run)
    out = Path(args.out) if args.out else run_dir / "select.json"
    if out.exists():
        ap.error(f"--out {out} exists and is not overwritten")
    bad = ([n for n in args.averages if n < 1] + [b for b in args.beams if b < 1]
           + [n for n in args.ensembles if n < 2])
    if bad or any(a < 0 for a in args.alphas):
        ap.error("--averages and --beams take positive integers, --ensembles integers >= 2, "
                 "--alphas numbers >= 0")
    try:
        index = read_index(run_dir)
    except ValueError as err:
        ap.error(f"{run_dir}: kept.json cannot be read: {err}")
    if index is None:
        ap.error(f"{run_dir} has no checkpoints/avg/kept.json: train it with callbacks.average")
    scored = [e for e in index["kept"] if e.get("score") is not None]
    too_many = [n for n in args.averages + args.ensembles if n > len(scored)]
    if too_many:
        ap.error(f"--averages/--ensembles {' '.join(map(str, too_many))}: the run kept "
                 f"{len(scored)} scored epochs")

    decodings = [(b, a) for b in args.beams for a in args.alphas]
    results, metric = [], "tok_lc_bleu"
    try:
        candidates = ([("average", n) for n in args.averages]
                      + [("ensemble", n) for n in args.ensembles])
        for combine, n in candidates:  # the N best as callbacks.average ranks them (ties: newer)
            epochs = [e["epoch"] for e in select_kept(scored, "best", n, index.get("mode") or "max")]
            ckpts = ([_averaged(run_dir, epochs)] if combine == "average"
                     else [_averaged(run_dir, [e]) for e in epochs])
            rows, lowercase = _scores(ckpts, "val", decodings)
            metric = "tok_lc_bleu" if lowercase else "sacrebleu"
            results += [{"combine": combine, "n": n, "epochs": epochs,
                         "checkpoints": [str(c) for c in ckpts], **row, "score": row[metric]}
                        for row in rows]
    except (CheckpointError, InferenceError) as err:  # not a translation run, a missing file
        print(f"mt_select: {err}", file=sys.stderr)
        return 2
    best = max(results, key=lambda r: r["score"])  # ties: the first (fewer epochs, smaller beam, α)
    test = None
    if args.test:
        row = _scores([Path(c) for c in best["checkpoints"]], "test",
                      [(best["beam"], best["alpha"])])[0][0]
        test = {**row, "score": row[metric]}

    print(f"\n{run_dir} — val {metric} (1,014 sentences); rows: epochs averaged or ensembled, "
          f"columns: beam/α")
    cols = [f"{b}/{a:g}" for b, a in decodings]
    print(f"{'epochs':>26} " + " ".join(f"{c:>7}" for c in cols))
    for combine, n in candidates:
        row = [r for r in results if (r["combine"], r["n"]) == (combine, n)]
        label = f"{combine} {n}: " + ",".join(map(str, row[0]["epochs"]))
        print(f"{label:>26} " + " ".join(f"{r['score']:7.2f}" for r in row))
    print(f"choice: {best['combine']} of the best {best['n']} (epochs {', '.join(map(str, best['epochs']))}), beam "
          f"{best['beam']}, α {best['alpha']:g}: val {best['score']:.2f}"
          + (f"; test_2016 {metric} {test['score']:.2f} (sacreBLEU {test['sacrebleu']:.2f})"
             if test else ""))
    record = {"run_dir": str(run_dir), "metric": metric, "kept": index["kept"], "val": results,
              "choice": best, "test": test, "created": _dt.datetime.now().isoformat(timespec="seconds"),
              "threads": torch.get_num_threads()}
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "x") as f:
        json.dump(record, f, indent=2)
    print(f"written: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
