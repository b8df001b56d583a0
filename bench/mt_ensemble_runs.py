"""Decode Multi30k's val and test_2016 with the final checkpoints of several runs as one ensemble
(the mean of their next-token distributions, :mod:`attnflow.models.ensemble`; Sutskever et al.
2014 §3.6): what training the same recipe N times buys, to report beside the single runs (a
report, not a selection: one decoding, given on the command line, nothing chosen on test).

    python bench/mt_ensemble_runs.py RUN RUN ... [--beam 5] [--alpha 1.0] [--threads 1] [--out PATH]

Each RUN is a run directory, which contributes the checkpoint attnflow-translate would load
(``find_checkpoint``: the one ``metrics.json`` names best — ``checkpoints/averaged.ckpt`` for a
run trained with ``callbacks.average``, e.g. ``experiment=mt_transformer_3h_ende`` — else
``last.ckpt``), or a ``.ckpt`` file of a run (e.g. the average ``bench/mt_select.py`` chose,
``checkpoints/avg-epochs-….ckpt``); the runs must share their tokenizers (``load_members``
refuses others by name). The members are loaded once for every split.
Prints val and test BLEU of the ensemble (tokenised lower-cased for a lower-cased run, and
sacreBLEU) and writes them to a JSON file (default ``ensemble_runs.json`` here; never overwritten).
Scoring is ``bench/mt_select.py``'s (``bench/mt_multi30k.py``'s ``--evaluate`` path).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", type=Path, nargs="+", help="run directories or .ckpt files (at least two)")
    ap.add_argument("--beam", type=int, default=5)
    ap.add_argument("--alpha", type=float, default=1.0, help="GNMT length penalty α")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--splits", nargs="+", default=["val", "test"], choices=["val", "test"])
    ap.add_argument("--out", type=Path, default=Path("ensemble_runs.json"))
    args = ap.parse_args(argv)
    if len(args.runs) < 2:
        ap.error("give at least two run directories")
    missing = [str(r) for r in args.runs if not (r.is_dir() or (r.is_file() and r.suffix == ".ckpt"))]
    if missing:
        ap.error(f"not a run directory or a .ckpt file: {', '.join(missing)}")
    if args.out.exists():
        ap.error(f"--out {args.out} exists; give another path (results are never overwritten)")
    from attnflow.io.checkpoints import CheckpointError, find_checkpoint

    try:
        ckpts = [find_checkpoint(r)[0] for r in args.runs]  # what load_members will read
    except CheckpointError as err:
        ap.error(str(err))
    import torch

    from attnflow.inference.translation import load_members
    from mt_select import decode

    torch.set_num_threads(args.threads)
    model, dm, _ = load_members(ckpts)
    name = "+".join(c.name for c in ckpts)
    result = {"members": [str(c) for c in ckpts], "beam": args.beam, "alpha": args.alpha}
    for split in args.splits:
        result[split] = decode(model, dm, name, split, [(args.beam, args.alpha)])[0]
    args.out.write_text(json.dumps(result, indent=2))
    print(f"written: {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
