"""A BERT pretraining step on a device: attnflow's ``bert`` against HF's BertForPreTraining, with MFU.

bench/bert.py's models, batch, variants (``attnflow``, ``hf``, ``hf_sel``), AdamW and equivalence
check (its docstring) at a preset's sizes: ``base`` is BERT-base (d=768, 12 layers, 12 heads, FFN
3072, V=30,522) at T=512, B=32; ``mini`` bert_mini's (d=256, 4 layers, 4 heads, FFN 1024) at
T=128, B=32; ``tiny`` (d=64, 2 layers, 2 heads, FFN 128, V=1,000, T=64, B=4) is a smoke run for a
CPU. On CUDA the loss runs under bf16 autocast (``--dtype``) and each sample is timed with CUDA
events; the variants alternate as in bench/bert.py. HF keeps its default ``sdpa`` attention.

Reported per variant: tokens/s (non-padding input tokens), the ratio attnflow / HF (goal ≥ 1.2 for
BERT-base on an H100/H200), the step's peak GPU memory above the resident models, and the model
FLOP utilisation

    MFU = (6·N + 12·L·T·d) · tokens/s / peak

N the parameters less the position and segment embeddings (the word embeddings count: the tied MLM
decoder multiplies by them), 6·N the matrix products' forward and backward per token, 12·L·T·d the
attention's scores and weighted sums (Chowdhery et al. 2022, PaLM, App. B; nanoGPT's
``estimate_mfu``); peak = ``--peak-tflops`` (989: the H100 SXM's dense bf16, the H200's too). Every
variant is charged the same FLOPs per token (attnflow's MLM head at the selected positions only
does fewer: its design), so their MFUs stand in the ratio of their tokens/s. Goal ≥ 40 %.

Without HF transformers only ``attnflow`` runs (and no equivalence check). The check runs on the
CPU in float32 at the preset's sizes on a batch of 2 × 64 tokens before anything is timed.

Usage::

    python bench/bert.py --device cuda --preset base                   # or bench/bert_gpu.py
    python bench/bert.py --device cpu --preset tiny --repeats 1        # the CPU smoke run

JSON: bench/results/bert_step-<preset>-<UTC date>.json (``--out``).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/ siblings, also when loaded by path
from timing import DTYPES, git_commit, machine, result_path, time_variants  # noqa: E402

import torch  # noqa: E402

import bert  # noqa: E402

PRESETS = {  # sizes, vocabulary, batch, sequence length
    "base": dict(d_model=768, layers=12, heads=12, ffn_dim=3072, vocab=30522, batch=32, seq_len=512),
    "mini": dict(d_model=256, layers=4, heads=4, ffn_dim=1024, vocab=30522, batch=32, seq_len=128),
    "tiny": dict(d_model=64, layers=2, heads=2, ffn_dim=128, vocab=1000, batch=4, seq_len=64),
}


def flops_per_token(model: torch.nn.Module, layers: int, seq_len: int, d_model: int) -> Dict[str, int]:
    """6·N + 12·L·T·d (module docstring); N without the position and segment embeddings."""
    n = sum(p.numel() for name, p in model.named_parameters()
            if "positional." not in name and "segment_embedding." not in name)
    return {"params_N": n, "flops_per_token": 6 * n + 12 * layers * seq_len * d_model}


def device_step(module: torch.nn.Module, loss_fn, batch, dtype: torch.dtype):
    """bench/bert.py's step (loss, zero_grad, backward, AdamW) with the loss under autocast."""
    device = batch["input_ids"].device

    def loss(b):
        with torch.autocast(device.type, dtype=dtype, enabled=dtype != torch.float32):
            return loss_fn(b).float()
    return bert.make_step(module, loss, batch)


def main(argv: Optional[List[str]] = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default=None, help="cpu or cuda (default: cuda when there is one)")
    ap.add_argument("--preset", choices=sorted(PRESETS), default=None,
                    help="sizes (default: base on cuda, tiny on cpu)")
    ap.add_argument("--dtype", choices=sorted(DTYPES), default=None,
                    help="autocast dtype (default: bf16 on cuda, fp32 on cpu)")
    ap.add_argument("--variants", nargs="+", choices=bert.VARIANTS, default=list(bert.VARIANTS))
    ap.add_argument("--batch", type=int, help="sequences per step (default: the preset's)")
    ap.add_argument("--seq-len", type=int, help="the longest sequence (default: the preset's)")
    ap.add_argument("--short-seq-prob", type=float, default=0.1,
                    help="share of shorter pairs, as the data module makes them (0: no padding)")
    ap.add_argument("--repeats", type=int, default=7, help="timed samples per variant")
    ap.add_argument("--number", type=int, default=3, help="steps per timed sample")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps per variant")
    ap.add_argument("--peak-tflops", type=float, default=989.0,
                    help="the device's peak (dense) TFLOP/s at --dtype: 989 for H100 SXM / H200 bf16")
    ap.add_argument("--no-check", dest="check", action="store_false", help="skip the equivalence check")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", help="JSON path (default bench/results/bert_step-<preset>-<UTC date>.json)")
    args = ap.parse_args(argv)
    args.device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    args.preset = args.preset or ("base" if cuda else "tiny")
    args.dtype = args.dtype or ("bf16" if cuda else "fp32")
    dtype = DTYPES[args.dtype]
    p = PRESETS[args.preset]
    vocab, batch_size, seq_len = p["vocab"], args.batch or p["batch"], args.seq_len or p["seq_len"]
    sizes = {k: p[k] for k in ("d_model", "layers", "heads", "ffn_dim")}
    sizes["max_len"] = max(512, seq_len)

    try:
        import transformers
        hf_version = transformers.__version__
    except ImportError:
        hf_version = None
        args.variants = [v for v in args.variants if v == "attnflow"]
        print("HF transformers is not installed: attnflow alone, no equivalence check")
    started, t_start = _dt.datetime.now(_dt.timezone.utc), time.perf_counter()
    load0 = os.getloadavg()[0]
    diffs = None
    if args.check and hf_version:
        small = bert.make_batch(vocab, 2, min(seq_len, 64), seed=args.seed)
        try:
            diffs = bert.check_equivalence(vocab, small, seed=args.seed, **sizes)
        except AssertionError as err:
            raise SystemExit(f"bench/bert_gpu.py: not timed, the two models compute different "
                             f"functions: {err}") from None
        print("attnflow = HF with copied weights, dropout off, float32 on the CPU (max abs diff): "
              + ", ".join(f"{k} {v:.1e}" for k, v in diffs.items()), flush=True)

    batch = bert.make_batch(vocab, batch_size, seq_len, args.short_seq_prob, seed=args.seed)
    batch["hf_mask"] = batch["attention_mask"].long()
    batch = {k: v.to(device) for k, v in batch.items()}
    tokens = int(batch["attention_mask"].sum())
    T = batch["input_ids"].shape[1]
    built = {k: bert.build_variant(k, vocab, args.seed, **sizes) for k in args.variants}
    flops = flops_per_token(built["attnflow"][0] if "attnflow" in built else bert.build_attnflow(vocab, **sizes),
                            sizes["layers"], T, sizes["d_model"])
    steps, memory, first = {}, {}, {}
    for k, (module, fn) in built.items():
        steps[k] = device_step(module.to(device).train(), fn, batch, dtype)
        if cuda:
            torch.cuda.synchronize()
            resident = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
        t0 = time.perf_counter()
        steps[k]()  # the first step (AdamW's state appears), outside the timing
        if cuda:
            torch.cuda.synchronize()
            memory[k] = round((torch.cuda.max_memory_allocated() - resident) / 2**20)
        first[k] = round(time.perf_counter() - t0, 2)
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    samples = time_variants(steps, args.repeats, args.number, max(0, args.warmup - 1), tokens, sync, events=cuda)
    med = {k: statistics.median(v) for k, v in samples.items()}
    peak = args.peak_tflops * 1e12
    mfu = {k: flops["flops_per_token"] * v / peak for k, v in med.items()}
    ratio = {k: med["attnflow"] / med[k] for k in med if k != "attnflow" and "attnflow" in med}
    paired = {k: statistics.median(a / h for a, h in zip(samples["attnflow"], samples[k])) for k in ratio}
    result = {
        "benchmark": "bert_step", "date": started.isoformat(timespec="seconds"),
        "command": " ".join([Path(sys.executable).name, *sys.argv]), "args": vars(args),
        "commit": git_commit(), "machine": machine(args.device), "python": platform.python_version(),
        "torch": torch.__version__, "transformers": hf_version, "hf_attention": "sdpa",
        "sizes": sizes, "vocab": vocab, "batch_shape": list(batch["input_ids"].shape),
        "tokens_per_step": tokens, "padding_share": 1 - tokens / batch["input_ids"].numel(),
        **flops, "peak_tflops": args.peak_tflops, "first_step_s": first, "step_peak_mib": memory,
        "samples": samples, "tokens_per_s_median": med, "ratio": ratio, "paired_ratio": paired,
        "mfu": mfu, "goals": {"ratio_attnflow_hf": 1.2, "mfu": 0.40},
        "equivalence_max_abs_diff": diffs, "loadavg_start": load0, "loadavg_end": os.getloadavg()[0],
        "elapsed_s": round(time.perf_counter() - t_start, 1),
    }
    print_table(result)
    out = result_path(f"bert_step-{args.preset}", started, args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(f"written {out} ({result['elapsed_s']:.0f} s)")
    return result


def print_table(r: dict) -> None:
    """A markdown table: tokens/s, attnflow / variant, MFU, first step, step memory."""
    a = r["args"]
    print(f"\nBERT pretraining step ({a['preset']}: d={r['sizes']['d_model']}, L={r['sizes']['layers']}, "
          f"V={r['vocab']}, batch {r['batch_shape']}, {r['padding_share']:.0%} padding), {a['dtype']} on "
          f"{r['machine'].get('gpu', a['device'])}, torch {r['torch']}; MFU at {a['peak_tflops']:g} TFLOP/s, "
          f"{r['flops_per_token'] / 1e9:.3g} GFLOP/token (N = {r['params_N'] / 1e6:.1f}M)\n")
    print("| variant | tokens/s | attnflow / it | (paired) | MFU | first step s | step MiB |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for k, v in r["tokens_per_s_median"].items():
        ratio = f"{r['ratio'][k]:.2f}" if k in r["ratio"] else ""
        paired = f"{r['paired_ratio'][k]:.2f}" if k in r["paired_ratio"] else ""
        print(f"| {k} | {v:,.0f} | {ratio} | {paired} | {r['mfu'][k]:.1%} | {r['first_step_s'][k]} "
              f"| {r['step_peak_mib'].get(k, '')} |")
    if "hf" in r["ratio"]:
        print(f"\ngoals: attnflow / hf {r['ratio']['hf']:.2f} (≥ 1.2), attnflow MFU "
              f"{r['mfu']['attnflow']:.1%} (≥ 40 %)")


if __name__ == "__main__":
    main()
