"""A training step of the translation task, its loss against the usual idiom's, and R-Drop's cost.

The same model as bench/transformer_throughput.py (d=256, 8 heads, FFN 1024, 3+3 layers, dropout
0.1, tied embeddings, 8,000 ids) and the same batch of random tokens (B=64, source and target
lengths in [12, 24], padding masked), label smoothing 0.1, fused Adam (as training builds it);
one step = forward + loss + backward + optimizer step, under bf16 autocast with ``--bf16``.
Variants, timed alternately (order reversed every other repetition), medians of target tokens/s:

- ``task``: ``TranslationTask._loss`` (the model's output layer and the cross-entropy at the real
  target tokens only: ``positions``);
- ``peer``: the usual idiom on the same model — ``F.cross_entropy(logits.transpose(1, 2), target,
  ignore_index=pad)`` over every padded position, plus the argmax for the token accuracy (the
  task's loss until 2026-11-25);
- ``rows``: the logits at every position, the cross-entropy and argmax on the real tokens' rows
  (what ``positions`` adds to it is the output layer's saving);
- ``rdrop``: the task with ``rdrop_alpha=5`` (the batch run twice in one pass).

Figures to read, from the same run: task / peer and task / rows (goal ≥ 1), and rdrop / task
(R-Drop's step costs about 2× the compute; ≥ 0.5 means no overhead beyond the doubled batch).

With ``--compare-bf16`` it times the ``task`` step alone in float32 and under bf16 autocast
(alternating; what ``trainer.precision`` 32-true and bf16-mixed run) and prints their ratio beside
what :mod:`attnflow.training.precision` finds of this CPU: where bfloat16 is emulated (no AVX512-BF16 or
AMX) bf16 is many times slower, which is why ``trainer.precision=auto`` picks 32-true there.

With ``--batch-sizes 16 32 64`` it times the ``task`` step alone at those batch sizes instead
(alternating, each size its own task and Adam) and reports target tokens/s and the ratio to
``--batch``'s: on one CPU thread the token rate depends on B (cache size against the matrix
products' sizes), which decides ``data.batch_size`` for a time box (docs/benchmarks.md).

Usage::

    python bench/translation_step.py [--repeats 9] [--number 2] [--threads 1] [--bf16] [--out PATH]
        [--batch B] [--batch-sizes B …] [--compare-bf16] [--device cuda]
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import torch
import torch.nn.functional as F

from attnflow.config.registry import TASKS
from attnflow.tasks.optim import make_optimizer
from timing import print_rates, time_variants, write_result
from transformer_throughput import PAD, build_attnflow, make_batch, step_args


def build_task(rdrop_alpha: float = 0.0, device: str = "cpu"):
    torch.manual_seed(0)
    return TASKS.build({"name": "translation", "label_smoothing": 0.1, "rdrop_alpha": rdrop_alpha},
                       build_attnflow(), pad_id=PAD, bos_id=1, eos_id=2, max_decode_len=8,
                       path="task").train().to(device)


def step_fn(task, batch, kind: str, bf16: bool):
    device = next(task.parameters()).device
    src, src_len, tgt_in, tgt_out = (t.to(device) for t in batch)
    b = {"src": src, "src_lengths": src_len, "tgt_in": tgt_in, "tgt_out": tgt_out}
    task.log = lambda *a, **k: None  # no trainer here
    opt = make_optimizer(task.parameters(), "adam", 1e-4, 0.0)  # the fused Adam training builds

    def loss():
        if kind in ("task", "rdrop"):
            return task._loss(b, "train")
        logits, _ = task.model(src, src_len, tgt_in)
        if kind == "rows":
            valid = tgt_out != PAD
            logits, target = logits[valid], tgt_out[valid]
            value = F.cross_entropy(logits, target, label_smoothing=0.1)
            (logits.argmax(-1) == target).float().mean()
            return value
        value = F.cross_entropy(logits.transpose(1, 2), tgt_out, ignore_index=PAD, label_smoothing=0.1)
        (logits.argmax(-1) == tgt_out)[tgt_out != PAD].float().mean()
        return value

    def step():
        with torch.autocast(device.type, dtype=torch.bfloat16) if bf16 else contextlib.nullcontext():
            value = loss()
        opt.zero_grad(set_to_none=True)
        value.backward()
        opt.step()
    return step


def sync(device: str):
    """What ends a timed sample on ``device``: waiting for its queued kernels on a GPU."""
    return torch.cuda.synchronize if torch.device(device).type == "cuda" else (lambda: None)


def batch_sizes(args) -> None:
    """``--batch-sizes``: the task's step alone at each batch size (B sentences of the same
    length range, each size its own task and Adam), alternating; tokens/s and the ratio to
    ``--batch``'s."""
    sizes = sorted(set(args.batch_sizes) | {args.batch})
    batches = {f"B={b}": make_batch(b, args.src_len, args.tgt_len) for b in sizes}
    tokens = {k: int((v[3] != PAD).sum()) for k, v in batches.items()}
    steps = {k: step_fn(build_task(device=args.device), v, "task", args.bf16) for k, v in batches.items()}
    load0 = os.getloadavg()[0]
    samples = time_variants(steps, args.repeats, args.number, 2, tokens, sync(args.device))
    print(f"the task's step by batch size: S={args.src_len} T={args.tgt_len} bf16={args.bf16} device={args.device} "
          f"threads={torch.get_num_threads()}")
    med = print_rates(samples, "batch", {"tokens/step": {k: str(n) for k, n in tokens.items()}}, width=8)
    ratios = {k: v / med[f"B={args.batch}"] for k, v in med.items()}
    print("  ".join(f"{k} / B={args.batch} = {r:.3f}" for k, r in ratios.items()))
    write_result(args.out, "translation_step_batch_sizes", load0, args=vars(args),
                 tokens_per_step=tokens, tokens_per_s_median=med, samples=samples, ratios=ratios)


def compare_bf16(args) -> None:
    """``--compare-bf16``: the task's step in float32 and under bf16 autocast, alternating."""
    from attnflow.training.precision import native_bf16

    batch = make_batch(args.batch, args.src_len, args.tgt_len)
    tokens = int((batch[3] != PAD).sum())
    steps = {kind: step_fn(build_task(device=args.device), batch, "task", kind == "bf16")
             for kind in ("float32", "bf16")}
    load0 = os.getloadavg()[0]
    samples = time_variants(steps, args.repeats, args.number, 1, tokens, sync(args.device))
    native, why = native_bf16("cuda" if torch.device(args.device).type == "cuda" else "cpu")
    print(f"the task's step, float32 against bf16 autocast: B={args.batch} device={args.device} "
          f"threads={torch.get_num_threads()}; native bfloat16: {native} ({why})")
    med = print_rates(samples, "precision")
    ratio = med["bf16"] / med["float32"]
    print(f"bf16 / float32 = {ratio:.3f} (above 1: bf16 is faster here)")
    write_result(args.out, "translation_step_bf16", load0, args=vars(args), tokens_per_step=tokens,
                 native_bf16=native, native_bf16_reason=why, tokens_per_s_median=med,
                 samples=samples, ratio_bf16_float32=ratio)


def main():
    ap = step_args("translation_step", 2)
    ap.add_argument("--bf16", action="store_true", help="bf16 autocast (trainer.precision=bf16-mixed)")
    ap.add_argument("--device", default="cpu", help="cpu or cuda (samples end with torch.cuda.synchronize())")
    ap.add_argument("--batch-sizes", type=int, nargs="+", metavar="B",
                    help="time the task's step at these batch sizes (and --batch's) instead of the variants")
    ap.add_argument("--compare-bf16", action="store_true",
                    help="time the task's step in float32 and under bf16 autocast instead of the variants")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.batch_sizes:
        if min(args.batch_sizes) < 1:
            ap.error(f"--batch-sizes must be >= 1, got {args.batch_sizes}")
        if args.out == ap.get_default("out"):  # the variants' figures stay where they are
            args.out = str(Path(args.out).with_name("translation_step_batch_sizes.json"))
        return batch_sizes(args)
    if args.compare_bf16:
        if args.out == ap.get_default("out"):
            args.out = str(Path(args.out).with_name("translation_step_bf16.json"))
        return compare_bf16(args)
    batch = make_batch(args.batch, args.src_len, args.tgt_len)
    tokens = int((batch[3] != PAD).sum())
    steps = {"task": step_fn(build_task(device=args.device), batch, "task", args.bf16),
             "peer": step_fn(build_task(device=args.device), batch, "peer", args.bf16),
             "rows": step_fn(build_task(device=args.device), batch, "rows", args.bf16),
             "rdrop": step_fn(build_task(5.0, args.device), batch, "rdrop", args.bf16)}
    load0 = os.getloadavg()[0]
    samples = time_variants(steps, args.repeats, args.number, 2, tokens, sync(args.device))
    padding = 1 - tokens / batch[3].numel()
    print(f"B={args.batch} S={args.src_len} T={args.tgt_len} target tokens/step={tokens} "
          f"(padding {padding:.0%}) bf16={args.bf16} device={args.device} threads={torch.get_num_threads()}")
    med = print_rates(samples, "variant", width=8)
    ratios = {"task/peer": med["task"] / med["peer"], "task/rows": med["task"] / med["rows"],
              "rdrop/task": med["rdrop"] / med["task"]}
    print("  ".join(f"{k} = {v:.3f}" for k, v in ratios.items()))
    write_result(args.out, "translation_step", load0, args=vars(args), tokens_per_step=tokens,
                 padding_share=padding, tokens_per_s_median=med, samples=samples, ratios=ratios)

if __name__ == "__main__":
    main()
