"""Multi30k translation benchmark: RNNsearch against the CPU Transformer, de→en and en→de.

Trains each model with ``attnflow.training.run.train`` (the same code path as ``attnflow-train``), then
reports for the test_2016_flickr split (best checkpoint by val BLEU; beam search of the
translation task):

- sacreBLEU (detokenised, case-sensitive, 13a) with its signature;
- "tok-lc BLEU": lower-cased BLEU on 13a-tokenised text — what the widely used PyTorch tutorials
  report (spaCy-tokenised, lower-cased, torchtext ``bleu_score``; 13a splits punctuation the same
  way, so this is close but not identical); the gap tok-lc − sacreBLEU is printed;
- WER, wall time of training, and training throughput in target tokens per second
  (target subwords incl. ⟨eos⟩ of every training epoch / fit seconds).
Ratios are against the peer trained in the same run (rnnsearch / transformer).

Anchors (de→en, test 2016, tokenised BLEU, tutorials): Bahdanau attention 28.3, Transformer 36.5.

    python bench/mt_multi30k.py                                    # full: hours on a 2-core CPU
    python bench/mt_multi30k.py --quick                            # minutes: 2,000 pairs, 1 epoch
    python bench/mt_multi30k.py --models rnnsearch --directions de-en --epochs 10
    python bench/mt_multi30k.py --models transformer_tiny --threads 1   # issue 13: Wu et al.'s sizes

Writes bench/results/mt_multi30k.json (git-ignored) and the run directories under
bench/results/mt_runs/.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

EXPERIMENTS = {"rnnsearch": "mt_rnnsearch", "transformer": "mt_transformer",
               "luong": "mt_luong", "rnnenc": "mt_rnnenc",
               "transformer_40min": "mt_transformer_40min", "transformer_tiny": "mt_transformer_tiny"}
ANCHORS = {("rnnsearch", "de-en"): 28.3, ("transformer", "de-en"): 36.5}


def target_tokens(run_dir: Path, data_cfg: dict) -> tuple:
    """Target subwords (+⟨eos⟩) of one training epoch, with the run's saved tokenizer, and the
    number of training batches of an epoch (``data_cfg``: the run's resolved data config)."""
    from attnflow.config.registry import DATA

    dm = DATA.build(data_cfg)
    dm.set_run_dir(run_dir)
    dm.setup()
    return sum(len(t) + 1 for _, _, t in dm.splits["train"]), len(dm.train_dataloader())


LC_MARK = "*"
def lc_note(gap: bool) -> str:
    """The footnote of a table with a lower-cased run (``gap``: the table has the gap column)."""
    return (f"{LC_MARK} a lower-cased run (data.lowercase=true): its output is lower case, so its "
            f"cased sacreBLEU{' (and the gap)' if gap else ''} says nothing; read tok-lc")


def run_one(model: str, direction: str, args) -> dict:
    from omegaconf import OmegaConf

    from attnflow.training.run import train
    from support import compose_cfg

    src, tgt = direction.split("-")
    run_dir = Path(args.out) / "mt_runs" / f"{model}_{direction}"
    shutil.rmtree(run_dir, ignore_errors=True)  # a fresh run: no stale checkpoints or tokenizers
    overrides = [f"experiment={EXPERIMENTS[model]}", f"data.src_lang={src}", f"data.tgt_lang={tgt}",
                 "callbacks.progress_bar=none", "logger=csv", "trainer.accelerator=cpu",
                 f"task.beam_size={args.beam}"]
    if args.epochs:
        overrides.append(f"trainer.max_epochs={args.epochs}")
    if args.max_pairs:
        overrides.append(f"data.max_pairs={args.max_pairs}")
    if args.max_steps:
        overrides.append(f"trainer.max_steps={args.max_steps}")
    overrides += args.override
    start = time.time()
    summary = train(compose_cfg(overrides), run_dir)
    wall = time.time() - start
    m = summary["metrics"]
    data_cfg = OmegaConf.to_container(compose_cfg(overrides), resolve=True)["data"]
    lowercase = bool(data_cfg.get("lowercase"))
    per_epoch, batches = target_tokens(run_dir, data_cfg)
    tokens = per_epoch * summary["global_step"] / batches  # also right when max_time cut an epoch
    return {"model": model, "direction": direction, "test_sacrebleu": m.get("test/bleu"),
            "test_tok_lc_bleu": m.get("test/bleu_lc"), "test_wer": m.get("test/wer"),
            "val_sacrebleu": m.get("best/val/bleu"), "fit_seconds": summary["fit_seconds"],
            "wall_seconds": round(wall, 1), "epochs": summary["epochs"],
            "steps": summary["global_step"], "parameters": summary["parameters"],
            "train_tokens_per_s": round(tokens / max(summary["fit_seconds"], 1e-9), 1),
            "anchor_tok_bleu": ANCHORS.get((model, direction)), "run_dir": str(run_dir),
            "overrides": overrides, "signature": _signature(), "lowercase": lowercase}


def evaluate(run_dir: Path, beam: int, length_penalty: float, split: str = "test") -> dict:
    """Re-decode ``split`` of a trained run with the current decoding code (its best checkpoint,
    its tokenizers) and score it like the task does: sacreBLEU, lower-cased BLEU, WER."""
    from attnflow.inference.translation import load
    from attnflow.inference.translation import translate

    model, dm, cfg = load(run_dir)
    src, refs = dm.split_text(split)
    start = time.time()
    hyps, _ = translate(model, dm, src, beam=beam, length_penalty=length_penalty)
    seconds = time.time() - start
    return {"run_dir": str(run_dir), "split": split, "beam": beam, "length_penalty": length_penalty,
            **scores(hyps, refs), "sentences": len(hyps), "decode_seconds": round(seconds, 1),
            "signature": _signature(), "lowercase": bool(cfg["data"].get("lowercase"))}


def scores(hyps: list, refs: list) -> dict:
    """sacreBLEU (cased, 13a), tokenised lower-cased BLEU and WER of ``hyps`` against ``refs``,
    as the translation task scores them."""
    from attnflow.tasks.translation_metrics import corpus_bleu, word_error_rate

    return {"sacrebleu": corpus_bleu(hyps, refs)[0],
            "tok_lc_bleu": corpus_bleu(hyps, refs, lowercase=True)[0],
            "wer": word_error_rate(hyps, refs)}


def _signature() -> str:
    from attnflow.tasks.translation_metrics import corpus_bleu

    return corpus_bleu(["a b c d"], ["a b c d"])[1]  # the signature of the metric code path


def main(argv=None) -> int:
    from attnflow.training.onednn import bound_primitive_cache

    bound_primitive_cache()  # trains in this process, as attnflow-train does (bf16 memory)
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="rnnsearch,transformer")
    ap.add_argument("--directions", default="de-en,en-de")
    ap.add_argument("--epochs", type=int, default=0, help="0: the experiment's max_epochs")
    ap.add_argument("--max-pairs", type=int, default=0, help="first N pairs of every split (0: all)")
    ap.add_argument("--max-steps", type=int, default=0)
    ap.add_argument("--beam", type=int, default=4)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--quick", action="store_true",
                    help="smoke run: 2,000 pairs per split, 1 epoch, beam 2 (numbers not comparable)")
    ap.add_argument("--override", action="append", default=[], help="extra Hydra override")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    ap.add_argument("--evaluate", metavar="RUN_DIR", action="append", default=[],
                    help="no training: re-decode the test split of a trained run with the current "
                         "code (repeatable) and print its scores")
    ap.add_argument("--length-penalty", type=float, default=0.6, help="with --evaluate (GNMT alpha)")
    args = ap.parse_args(argv)
    unknown = [m for m in args.models.split(",") if m not in EXPERIMENTS]
    if unknown:
        ap.error(f"--models: unknown {', '.join(unknown)}; known: {', '.join(EXPERIMENTS)}")
    if args.evaluate:
        import torch

        if args.threads:
            torch.set_num_threads(args.threads)
        rows = [evaluate(Path(r), args.beam, args.length_penalty) for r in args.evaluate]
        for r in rows:
            print(f"{r['run_dir']}: sacreBLEU {r['sacrebleu']:.2f}{LC_MARK * r['lowercase']}  "
                  f"tok-lc {r['tok_lc_bleu']:.2f}  "
                  f"WER {r['wer']:.3f}  beam {r['beam']} lp {r['length_penalty']}  "
                  f"{r['decode_seconds']} s  ({r['signature']})")
        if any(r["lowercase"] for r in rows):
            print(lc_note(gap=False))
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "mt_multi30k_evaluate.json").write_text(json.dumps(rows, indent=2))
        return 0
    if args.quick:
        args.max_pairs, args.epochs, args.beam = args.max_pairs or 2000, args.epochs or 1, 2
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    rows = []
    for direction in args.directions.split(","):
        for model in args.models.split(","):
            print(f"== {model} {direction}", flush=True)
            rows.append(run_one(model, direction, args))
    by = {(r["model"], r["direction"]): r for r in rows}
    for r in rows:
        peer = by.get(("transformer" if r["model"] != "transformer" else "rnnsearch", r["direction"]))
        bleu = "test_tok_lc_bleu" if r["lowercase"] or (peer or {}).get("lowercase") else "test_sacrebleu"
        if peer and peer is not r and peer[bleu]:
            r["bleu_ratio_vs_peer"] = round(r[bleu] / peer[bleu], 3)  # tok-lc where either is lower-cased
            r["throughput_ratio_vs_peer"] = round(r["train_tokens_per_s"] / peer["train_tokens_per_s"], 3)
    head = f"{'model':12} {'dir':6} {'sacreBLEU':>9} {'tok-lc':>7} {'gap':>5} {'WER':>6} {'anchor':>6} " \
           f"{'fit s':>8} {'tok/s':>8} {'BLEU/peer':>9} {'tok/s/peer':>10}"
    print(head)
    for r in rows:
        gap = r["test_tok_lc_bleu"] - r["test_sacrebleu"]
        sacre = f"{r['test_sacrebleu']:.2f}{LC_MARK * r['lowercase']}"
        print(f"{r['model']:12} {r['direction']:6} {sacre:>9} {r['test_tok_lc_bleu']:7.2f} "
              f"{gap:5.2f} {r['test_wer']:6.3f} {str(r['anchor_tok_bleu'] or '-'):>6} "
              f"{r['fit_seconds']:8.1f} {r['train_tokens_per_s']:8.1f} "
              f"{str(r.get('bleu_ratio_vs_peer', '-')):>9} {str(r.get('throughput_ratio_vs_peer', '-')):>10}")
    print(f"sacreBLEU signature: {rows[0]['signature'] if rows else ''}")
    if any(r["lowercase"] for r in rows):
        print(lc_note(gap=True))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result = {"args": vars(args), "rows": rows, "cpu_count": os.cpu_count(),
              "torch_threads": torch.get_num_threads(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    (out / "mt_multi30k.json").write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
