"""Three parts of a CPU training step, attnflow's way against torch's usual call, on one thread.

- ``adam``: the optimiser step over the parameters of bench/transformer_throughput.py's model
  (7.6M, 128 tensors): ``torch.optim.Adam`` as built by default (a loop over the parameters) against
  the fused one that :func:`attnflow.tasks.optim.make_optimizer` builds;
- ``dropout``: forward + backward of ``F.dropout`` (torch's ``bernoulli_`` mask) against
  :func:`attnflow.blocks.dropout.dropout` (a mask from uniform draws) at the d=256 Transformer's
  shapes — (B, T, d) residuals and (B, T, FFN) activations, B=64, T=24 — in float32 and bf16, p 0.3;
- ``argmax``: ``logits.argmax(-1)`` against ``logits.max(-1).indices`` (the same first-maximum
  rule) on (tokens, vocabulary) = (1102, 8000) logits, float32 and bf16: the token accuracy's
  predictions in the translation task's step.

Each pair alternates (order reversed every other repetition); medians of milliseconds, and the ratio
torch / attnflow (above 1: attnflow's is faster). Prints a table, writes JSON.

    OMP_NUM_THREADS=1 python bench/cpu_step_parts.py [--repeats 15] [--number 10] [--out PATH]
"""

from __future__ import annotations

import argparse
import os
import statistics
from pathlib import Path

import torch
import torch.nn.functional as F

from attnflow.blocks.dropout import dropout
from attnflow.tasks.optim import make_optimizer
from timing import time_variants, write_result
from transformer_throughput import build_attnflow


def _pair_times(a, b, repeats: int, number: int):
    """Milliseconds per call of ``a`` and ``b``: :func:`timing.time_variants`' alternating samples
    (2 warm-up calls each) of calls per second, inverted."""
    rates = time_variants({"torch": a, "attnflow": b}, repeats, number, 2, 1)
    return {k: [1000.0 / r for r in v] for k, v in rates.items()}


def cases():
    """name -> (torch's call, attnflow's call)."""
    params = list(build_attnflow().parameters())
    for p in params:
        p.grad = torch.randn_like(p)
    plain = torch.optim.Adam(params, lr=1e-4)
    fused = make_optimizer(params, "adam", 1e-4, 0.0)
    yield "adam step (7.6M parameters)", plain.step, fused.step
    for shape in ((64, 24, 256), (64, 24, 1024)):
        for dtype in (torch.float32, torch.bfloat16):
            x = torch.randn(shape, dtype=dtype, requires_grad=True)
            g = torch.randn(shape, dtype=dtype)
            tag = f"dropout fwd+bwd {tuple(shape)} {str(dtype)[6:]}"
            yield tag, (lambda x=x, g=g: F.dropout(x, 0.3, True).backward(g)), \
                (lambda x=x, g=g: dropout(x, 0.3).backward(g))
    for dtype in (torch.float32, torch.bfloat16):
        logits = torch.randn(1102, 8000).to(dtype)
        yield f"argmax (1102, 8000) {str(dtype)[6:]}", (lambda z=logits: z.argmax(-1)), \
            (lambda z=logits: z.max(-1).indices)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--number", type=int, default=10, help="calls per timed sample")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "cpu_step_parts.json"))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    load0 = os.getloadavg()[0]
    rows = {}
    print(f"{'part':<42}{'torch ms':>10}{'attnflow ms':>13}{'torch/attnflow':>16}")
    for name, a, b in cases():
        t = _pair_times(a, b, args.repeats, args.number)
        med = {k: statistics.median(v) for k, v in t.items()}
        rows[name] = {"ms_median": med, "ratio": med["torch"] / med["attnflow"], "samples": t}
        print(f"{name:<42}{med['torch']:>10.2f}{med['attnflow']:>13.2f}{rows[name]['ratio']:>16.2f}")
    write_result(args.out, "cpu_step_parts", load0, args=vars(args), parts=rows)


if __name__ == "__main__":
    main()
