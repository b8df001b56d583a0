"""Forward+backward time of attnflow's multi-head attention against torch.nn.MultiheadAttention.

Self-attention (query = keys = values = x), training mode, B=32, d=256, J=8 heads (head_dim 32),
T in {64, 256}, with and without a key padding mask. Four variants run per shape:

- ``attnflow``: ``ATTENTIONS.build({"name": "multihead", ...})`` (scaled_dot, softmax,
  concat_proj), no maps requested, so it goes through ``F.scaled_dot_product_attention``;
- ``torch``: ``nn.MultiheadAttention(batch_first=True)``, ``need_weights=False``;
- ``attnflow+maps``: the same attnflow block with ``need_weights=True`` (explicit path);
- ``torch+maps``: torch with ``need_weights=True, average_attn_weights=False`` (per-head maps,
  the fair peer of attnflow's (B, J, T, T) maps).

The variants are interleaved round-robin (the order reversed on every other repetition, so none is
always first), each sample times ``number`` forward+backward steps with ``time.perf_counter``, and
the median per variant is reported. Ratios (attnflow / torch) come from the same run, which makes
them robust to the machine being busy; absolute milliseconds are not.

On a GPU (``--device cuda``) each sample ends with ``torch.cuda.synchronize()``, ``--bf16`` runs
both under bf16 autocast (the tolerance of the agreement check widens to bf16's), and the JSON
names the attention kernels one attnflow step launched (from ``torch.profiler``: flash,
memory-efficient or the plain matrix products), per shape.

Usage::

    python bench/attention_ops.py [--repeats N] [--shapes quick|full] [--device cuda] [--bf16] [--out PATH]
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
from typing import Callable, Dict, List, Optional

import torch
from torch import nn

from attnflow.config.registry import ATTENTIONS

B, D, HEADS = 32, 256, 8
SHAPES = {"quick": [64], "full": [64, 256]}
CONFIG = {"name": "multihead", "heads": HEADS, "scorer": {"name": "scaled_dot"},
          "normalizer": {"name": "softmax"}, "aggregator": {"name": "concat_proj"}}
VARIANTS = ["attnflow", "torch", "attnflow+maps", "torch+maps"]
SAMPLE_SECONDS = 0.1  # target duration of one timed sample (number steps)
TOLERANCE = 1e-5  # max |attnflow - torch| (outputs, maps, input gradients) before timing
# the same on a GPU in float32 (other kernels, other summation orders) and under bf16 autocast
# (8 bits of mantissa: outputs of about 1 differ by a few 1e-3)
TOLERANCE_CUDA, TOLERANCE_BF16 = 1e-4, 5e-2


def build_pair(seed: int = 0, device: str = "cpu"):
    """attnflow's block and torch's, with the same weights (train mode), on ``device``."""
    torch.manual_seed(seed)
    ours = ATTENTIONS.build(CONFIG, D, D, D)
    ref = nn.MultiheadAttention(D, HEADS, batch_first=True)
    with torch.no_grad():
        ref.in_proj_weight.copy_(torch.cat([ours.q_proj.weight, ours.k_proj.weight,
                                            ours.v_proj.weight]))
        ref.in_proj_bias.copy_(torch.cat([ours.q_proj.bias, ours.k_proj.bias, ours.v_proj.bias]))
        ref.out_proj.weight.copy_(ours.aggregator.proj.weight)
        ref.out_proj.bias.copy_(ours.aggregator.proj.bias)
    return ours.to(device).train(), ref.to(device).train()


def make_inputs(T: int, masked: bool, seed: int = 1, device: str = "cpu"):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(B, T, D, generator=g).to(device)
    grad_out = torch.randn(B, T, D, generator=g).to(device)
    if not masked:
        return x, grad_out, None, None
    lengths = torch.randint(T // 2, T + 1, (B,), generator=g)
    lengths[0] = T
    keep = (torch.arange(T) < lengths.unsqueeze(-1)).to(device)  # (B, T) True = attend
    return x, grad_out, keep.unsqueeze(1), ~keep  # attnflow (B, 1, T), torch (B, T) True = ignore


def make_steps(ours, ref, x, grad_out, ours_mask, ref_mask) -> Dict[str, Callable[[], None]]:
    xs = x.clone().requires_grad_(True)

    def clear(module):
        module.zero_grad(set_to_none=True)
        xs.grad = None

    def attnflow(maps: bool):
        def step():
            clear(ours)
            out, w = ours(xs, xs, xs, ours_mask, need_weights=maps)
            out.backward(grad_out)
        return step

    def torch_ref(maps: bool):
        def step():
            clear(ref)
            out, w = ref(xs, xs, xs, key_padding_mask=ref_mask, need_weights=maps,
                         average_attn_weights=False)
            out.backward(grad_out)
        return step

    return {"attnflow": attnflow(False), "torch": torch_ref(False),
            "attnflow+maps": attnflow(True), "torch+maps": torch_ref(True)}


def check_numbers(ours, ref, x, ours_mask, ref_mask) -> Dict[str, float]:
    """Max |attnflow - torch| of the outputs, the maps and the input gradient."""
    diffs = {}
    for maps in (False, True):
        xa = x.clone().requires_grad_(True)
        xb = x.clone().requires_grad_(True)
        torch.manual_seed(0)
        oa, wa = ours(xa, xa, xa, ours_mask, need_weights=maps)
        ob, wb = ref(xb, xb, xb, key_padding_mask=ref_mask, need_weights=maps,
                     average_attn_weights=False)
        oa.float().sum().backward()
        ob.float().sum().backward()
        tag = "maps" if maps else "no_maps"
        diffs[f"out_{tag}"] = (oa - ob).abs().max().item()
        diffs[f"grad_x_{tag}"] = (xa.grad - xb.grad).abs().max().item()
        if maps:
            diffs["weights"] = (wa - wb).abs().max().item()
    ours.zero_grad(set_to_none=True)
    ref.zero_grad(set_to_none=True)
    return diffs


def attention_kernels(step: Callable[[], None]) -> List[str]:
    """The names of the GPU kernels of one ``step`` that compute attention (SDPA's flash or
    memory-efficient kernels, or a softmax on the explicit path), from torch.profiler."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    names = {e.name for e in prof.events() if e.device_type.name == "CUDA"}
    keys = ("flash", "fmha", "efficient", "attention", "softmax")
    return sorted(n[:120] for n in names if any(k in n.lower() for k in keys))


def time_case(steps: Dict[str, Callable[[], None]], repeats: int, warmup: int,
              sync: Callable[[], None] = lambda: None) -> dict:
    for _ in range(warmup):
        for name in VARIANTS:
            steps[name]()
    sync()
    # number of steps per sample, the same for every variant of this shape
    t0 = time.perf_counter()
    steps["attnflow"]()
    sync()
    one = time.perf_counter() - t0
    number = max(1, round(SAMPLE_SECONDS / max(one, 1e-6)))
    samples: Dict[str, List[float]] = {name: [] for name in VARIANTS}
    for r in range(repeats):
        order = VARIANTS if r % 2 == 0 else VARIANTS[::-1]
        for name in order:
            step = steps[name]
            t0 = time.perf_counter()
            for _ in range(number):
                step()
            sync()
            samples[name].append((time.perf_counter() - t0) / number * 1e3)  # ms per step
    result = {"number": number, "samples_ms": samples}
    result["median_ms"] = {n: statistics.median(s) for n, s in samples.items()}
    result["min_ms"] = {n: min(s) for n, s in samples.items()}
    return result


def run_cases(device: str, shapes: str, repeats: int, warmup: int, tolerance: float,
              sync: Callable[[], None]) -> List[dict]:
    """Every shape with and without a padding mask: the agreement check, then the timings."""
    ours, ref = build_pair(device=device)
    cases = []
    for T in SHAPES[shapes]:
        for masked in (False, True):
            x, grad_out, ours_mask, ref_mask = make_inputs(T, masked, device=device)
            diffs = check_numbers(ours, ref, x, ours_mask, ref_mask)
            if max(diffs.values()) > tolerance:
                raise SystemExit(f"attnflow and torch disagree at T={T}, mask={masked}: {diffs}; "
                                 f"timing a wrong implementation is meaningless")
            steps = make_steps(ours, ref, x, grad_out, ours_mask, ref_mask)
            timing = time_case(steps, repeats, warmup, sync)
            if device.startswith("cuda"):
                timing["kernels"] = {v: attention_kernels(steps[v]) for v in ("attnflow", "attnflow+maps")}
            med, smp = timing["median_ms"], timing["samples_ms"]

            def paired(a: str, b: str) -> float:
                return statistics.median(x / y for x, y in zip(smp[a], smp[b]))

            cases.append({
                "B": B, "T": T, "d": D, "heads": HEADS, "head_dim": D // HEADS,
                "key_padding_mask": masked, **timing,
                "ratio": med["attnflow"] / med["torch"],
                "ratio_maps": med["attnflow+maps"] / med["torch+maps"],
                "maps_cost": med["attnflow+maps"] / med["attnflow"],
                "torch_maps_cost": med["torch+maps"] / med["torch"],
                "paired": {"ratio": paired("attnflow", "torch"),
                           "ratio_maps": paired("attnflow+maps", "torch+maps"),
                           "maps_cost": paired("attnflow+maps", "attnflow"),
                           "torch_maps_cost": paired("torch+maps", "torch")},
                "max_abs_diff": diffs,
            })
            print(f"T={T} mask={masked}: ratio {cases[-1]['ratio']:.3f}, "
                  f"maps ratio {cases[-1]['ratio_maps']:.3f}", file=sys.stderr, flush=True)
    return cases


def machine_info() -> dict:
    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    info = {"platform": platform.platform(), "python": platform.python_version(),
            "cpu": cpu, "cpu_count": os.cpu_count()}
    if hasattr(os, "getloadavg"):
        info["loadavg_start"] = list(os.getloadavg())
    return info


def git_state() -> dict:
    import subprocess

    root = Path(__file__).resolve().parents[1]
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True,
                                text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "attnflow"], cwd=root,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return {}
    return {"commit": commit, "attnflow_dirty": bool(dirty)}


def main(argv: Optional[List[str]] = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=15, help="timed samples per variant")
    p.add_argument("--shapes", choices=sorted(SHAPES), default="full",
                   help="quick: T=64; full: T in {64, 256}")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps per variant and shape")
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument("--bf16", action="store_true", help="both under bf16 autocast")
    p.add_argument("--out", default="bench/results/attention_ops.json")
    args = p.parse_args(argv)
    cuda = args.device.startswith("cuda")
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    tolerance = TOLERANCE_BF16 if args.bf16 else TOLERANCE_CUDA if cuda else TOLERANCE

    started = _dt.datetime.now().astimezone()
    info = machine_info()
    if cuda:
        info["gpu"] = torch.cuda.get_device_name(args.device)
    with torch.autocast(args.device.split(":")[0], dtype=torch.bfloat16, enabled=args.bf16):
        cases = run_cases(args.device, args.shapes, args.repeats, args.warmup, tolerance, sync)
    if hasattr(os, "getloadavg"):
        info["loadavg_end"] = list(os.getloadavg())
    elapsed = (_dt.datetime.now().astimezone() - started).total_seconds()

    report = {
        "benchmark": "attention_ops",
        "command": " ".join(["python", "bench/attention_ops.py", *(argv or sys.argv[1:])]),
        "date": started.isoformat(timespec="seconds"),
        "elapsed_s": round(elapsed, 1),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "machine": info,
        "git": git_state(),
        "mode": "train, forward+backward (grad of x and all parameters), "
                f"{'bf16 autocast' if args.bf16 else 'fp32'}, {info.get('gpu', args.device)}",
        "config": CONFIG,
        "repeats": args.repeats, "warmup": args.warmup, "shapes": args.shapes,
        "ratio_definition": "median attnflow / median torch, same run, interleaved; 'paired': "
                            "median over repetitions of the ratio within one repetition (robust "
                            "when the machine's load changes during the run)",
        "cases": cases,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2))
    print_table(report)
    print(f"wrote {out}")
    return report


def print_table(report: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"attention fwd+bwd, ms per step (median of {report['repeats']}), "
                        f"torch {report['torch']}, {report['mode'].split(', ', 1)[1]}, "
                        f"{report['threads']} threads")
    for col in ["T", "mask", "attnflow", "torch", "ratio", "(paired)", "attnflow+maps",
                "torch+maps", "ratio maps", "(paired)", "maps/no maps", "(paired)"]:
        table.add_column(col, justify="right")
    for c in report["cases"]:
        m, pr = c["median_ms"], c["paired"]
        table.add_row(str(c["T"]), "yes" if c["key_padding_mask"] else "no",
                      f"{m['attnflow']:.1f}", f"{m['torch']:.1f}", f"{c['ratio']:.3f}",
                      f"{pr['ratio']:.3f}", f"{m['attnflow+maps']:.1f}", f"{m['torch+maps']:.1f}",
                      f"{c['ratio_maps']:.3f}", f"{pr['ratio_maps']:.3f}",
                      f"{c['maps_cost']:.2f}x", f"{pr['maps_cost']:.2f}x")
    Console(width=max(Console().width, 140)).print(table)
    for c in report["cases"]:
        for variant, names in c.get("kernels", {}).items():
            print(f"T={c['T']} mask={'yes' if c['key_padding_mask'] else 'no'} {variant}: "
                  + ("; ".join(names) or "no attention kernel named"))


if __name__ == "__main__":
    main()
