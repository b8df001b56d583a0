"""Forward+backward time of attnflow's multi-head attention per scorer and backend, on a GPU.

Self-attention (query = keys = values = x), training mode, ``multihead`` with d=768, J=12 heads
(head_dim 64) and its default aggregator (concat_proj), B=16, T in {512, 2048}, under bf16
autocast. Each scorer (scaled_dot, dot, cosine, general, gat) runs on each backend the block offers
it (``backend``: ``sdpa`` for the dot-product scorers, ``flex``: FlexAttention, ``explicit``:
scores, mask, normaliser, weights @ values), beside a plain PyTorch reference, ``torch``: one q/k/v
projection, ``F.scaled_dot_product_attention`` (scaled dot product) and the output projection.

Per row: ms per step (median of ``--repeats`` samples of ``--number`` steps, timed with CUDA events
on a GPU; the variants of one T alternate, their order reversed every other repetition:
bench/timing.py), its ratio to the reference's time (× SDPA; goal for flex ≤ 1.5), the explicit
path's time over it (goal for flex at T=2048: ≥ 3), the step's peak memory above what was
allocated before it, the seconds of the variant's first call (on a GPU the block compiles
flex_attention in it, once per shape: the warmup keeps that out of the timing), and the largest
difference from the scorer's explicit path (``need_weights=True``; output and input gradient,
relative to the explicit path's largest value), on the timed inputs under the same autocast,
checked before the timing: a row beyond tolerance says MISMATCH (timed all the same).

On a CPU FlexAttention has no backward (torch 2.13): flex is timed forward only there (``fwd``),
beside forward-only rows of the reference and of the explicit path, its ratios' denominators.

Usage::

    python bench/gpu_attention.py                              # on cuda when there is one
    python bench/gpu_attention.py --seq-len 2048 --masks none padding --repeats 20
    python bench/gpu_attention.py --tiny --device cpu --repeats 1   # smoke: B=2, T=64, d=64, 4 heads

JSON: bench/results/gpu_attention-<UTC date>.json (``--out``), rewritten after each (T, mask).
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
import warnings
from pathlib import Path
from typing import Callable, Dict, List, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/timing.py, also when loaded by path
from timing import DTYPES, git_commit, machine, result_path, time_variants  # noqa: E402

import torch  # noqa: E402
import torch._dynamo  # noqa: E402,F401  (its config: the recompile limits)
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

from attnflow.config.registry import ATTENTIONS, SCORERS as SCORER_BLOCKS  # noqa: E402

SCORERS = ("scaled_dot", "dot", "cosine", "general", "gat")
BACKENDS = ("sdpa", "flex", "explicit")
TINY = dict(batch=2, seq_len=[64], d_model=64, heads=4)
SAMPLE_SECONDS = 0.05  # a timed sample's length with --number 0 (auto), at the fastest variant
GOALS = {"flex_vs_sdpa_max": 1.5, "flex_speedup_vs_explicit_min": 3.0, "at_T": 2048}


def plan(scorers) -> List[tuple]:
    """(scorer, backend) pairs to time: each backend the scorer allows (sdpa: dot products)."""
    return [(s, b) for s in scorers for b in BACKENDS if b != "sdpa" or SCORER_BLOCKS.get(s).dot_product]


class TorchSdpa(nn.Module):
    """The reference: q, k, v from one matmul, F.scaled_dot_product_attention, output projection."""

    def __init__(self, d: int, heads: int):
        super().__init__()
        self.heads = heads
        self.qkv, self.out = nn.Linear(d, 3 * d), nn.Linear(d, d)

    @torch.no_grad()
    def copy_from(self, block: nn.Module) -> "TorchSdpa":
        """The projections of attnflow's ``multihead`` (concat_proj): the same function."""
        self.qkv.weight.copy_(torch.cat([block.q_proj.weight, block.k_proj.weight, block.v_proj.weight]))
        self.qkv.bias.copy_(torch.cat([block.q_proj.bias, block.k_proj.bias, block.v_proj.bias]))
        self.out.weight.copy_(block.aggregator.proj.weight)
        self.out.bias.copy_(block.aggregator.proj.bias)
        return self

    def forward(self, x: torch.Tensor, keep: Optional[torch.Tensor] = None, causal: bool = False):
        B, T, d = x.shape
        q, k, v = self.qkv(x).unflatten(-1, (3, self.heads, d // self.heads)).permute(2, 0, 3, 1, 4)
        mask = None if keep is None else keep[:, None, None, :]  # (B, 1, 1, T), True = attend
        if causal and mask is not None:
            mask = mask & torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal and mask is None)
        return self.out(out.transpose(1, 2).flatten(2))


def build_blocks(pairs, d: int, heads: int, device, seed: int = 0) -> Dict[tuple, object]:
    """One block per (scorer, backend), the same weights for one scorer's backends; a block the
    library refuses (ConfigError: e.g. flex for a scorer it cannot express) is its message."""
    blocks: Dict[tuple, object] = {}
    first: Dict[str, nn.Module] = {}
    for scorer, backend in pairs:
        cfg = {"name": "multihead", "heads": heads, "scorer": {"name": scorer}, "backend": backend}
        torch.manual_seed(seed)
        try:
            block = ATTENTIONS.build(cfg, d, d, d)
        except Exception as err:  # refused by the block's own checks
            blocks[(scorer, backend)] = f"refused: {type(err).__name__}: {err}"
            continue
        if scorer in first:
            block.load_state_dict(first[scorer].state_dict())
        first.setdefault(scorer, block)
        blocks[(scorer, backend)] = block.to(device).train()
    if "scaled_dot" in first:
        torch.manual_seed(seed)
        blocks[("scaled_dot", "torch")] = TorchSdpa(d, heads).copy_from(first["scaled_dot"]).to(device).train()
    return blocks


def make_inputs(B: int, T: int, d: int, mask: str, device, seed: int = 1):
    """x, the output gradient and the key padding mask ((B, T), True = attend, or None)."""
    g = torch.Generator().manual_seed(seed)
    x, grad = torch.randn(B, T, d, generator=g), torch.randn(B, T, d, generator=g)
    keep = None
    if mask == "padding":
        lengths = torch.randint(T // 2, T + 1, (B,), generator=g)
        lengths[0] = T
        keep = (torch.arange(T) < lengths.unsqueeze(-1)).to(device)
    return x.to(device), grad.to(device), keep


def caller(module: nn.Module, keep, causal: bool) -> Callable[[torch.Tensor], torch.Tensor]:
    """x -> the block's output (self-attention) with the mask in the block's own form."""
    if isinstance(module, TorchSdpa):
        return lambda x: module(x, keep, causal)
    mask = None if keep is None else keep.unsqueeze(1)  # (B, 1, T)
    return lambda x: module(x, x, x, mask, causal=causal)[0]


def make_step(module, x, grad, keep, causal, passes: str, dtype, device_type) -> Callable[[], None]:
    call = caller(module, keep, causal)
    xs = x.detach().clone().requires_grad_(passes == "fwd+bwd")
    grads = {}

    def step():
        if passes == "fwd":
            with torch.no_grad(), torch.autocast(device_type, dtype=dtype, enabled=dtype != torch.float32):
                call(xs)
            return
        module.zero_grad(set_to_none=True)
        xs.grad = None
        with torch.autocast(device_type, dtype=dtype, enabled=dtype != torch.float32):
            out = call(xs)
        out.backward(grads.setdefault(out.dtype, grad.to(out.dtype)))
    return step


def check(blocks, pairs, x, keep, causal, dtype, fwd_only: set, deadline: float) -> Dict[tuple, dict]:
    """Per (scorer, backend), on the timing's own inputs: max |Δ| of the output and of x's
    gradient from the scorer's explicit path (``need_weights=True``; the scaled_dot one for the
    reference), over the largest |value| of the explicit path's; and the seconds of this first
    call (on a GPU flex_attention compiles in it)."""
    sync = torch.cuda.synchronize if x.is_cuda else (lambda: None)

    def run(module, explicit: bool, backward: bool):
        xs = x.detach().clone().requires_grad_(backward)
        mask = None if keep is None else keep.unsqueeze(1)
        with torch.set_grad_enabled(backward), \
                torch.autocast(x.device.type, dtype=dtype, enabled=dtype != torch.float32):
            if explicit:
                out = module(xs, xs, xs, mask, causal=causal, need_weights=True)[0]
            else:
                out = caller(module, keep, causal)(xs)
            if backward:
                out.float().sum().backward()
                module.zero_grad(set_to_none=True)
        return out.detach().float(), (xs.grad.float() if backward else None)

    refs, diffs = {}, {}
    for scorer, backend in pairs:
        module = blocks.get((scorer, backend))
        of = "scaled_dot" if backend == "torch" else scorer
        ref_block = blocks.get((of, "explicit"))
        if not isinstance(module, nn.Module) or time.monotonic() > deadline:
            continue
        backward = (scorer, backend) not in fwd_only
        try:
            sync()
            t0 = time.perf_counter()
            out, gx = run(module, False, backward)
            sync()
            first = round(time.perf_counter() - t0, 3)
            if not isinstance(ref_block, nn.Module):
                diffs[(scorer, backend)] = {"first_call_s": first}
                continue
            if (of, backward) not in refs:
                refs[(of, backward)] = run(ref_block, True, backward)
        except Exception as err:
            diffs[(scorer, backend)] = {"error": f"{type(err).__name__}: {str(err)[:300]}"}
            continue
        ref_out, ref_gx = refs[(of, backward)]
        d = {"out": ((out - ref_out).abs().max() / ref_out.abs().max().clamp_min(1e-6)).item()}
        if backward:
            d["grad_x"] = ((gx - ref_gx).abs().max() / ref_gx.abs().max().clamp_min(1e-6)).item()
        diffs[(scorer, backend)] = {"diff": d, "first_call_s": first}
    return diffs


def time_case(blocks, variants, x, grad, keep, causal, args, dtype, deadline) -> Dict[tuple, dict]:
    """Warm up every variant (its peak memory), then time them alternating."""
    cuda = x.device.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    steps, rows, one = {}, {}, {}
    for key in variants:  # key = (scorer, backend, passes)
        if time.monotonic() > deadline:
            rows[key] = {"error": "skipped: --deadline reached"}
            continue
        step = make_step(blocks[key[:2]], x, grad, keep, causal, key[2], dtype, x.device.type)
        try:
            if cuda:
                sync()
                before = torch.cuda.memory_allocated()
                torch.cuda.reset_peak_memory_stats()
            for _ in range(max(0, args.warmup)):
                step()
            sync()
            t0 = time.perf_counter()
            step()
            sync()
            one[key] = time.perf_counter() - t0
        except Exception as err:  # out of memory, a kernel that does not exist here, …
            rows[key] = {"error": f"{type(err).__name__}: {str(err)[:300]}"}
            if cuda:
                torch.cuda.empty_cache()
            continue
        rows[key] = {}
        if cuda:
            rows[key]["peak_mib"] = round((torch.cuda.max_memory_allocated() - before) / 2**20)
        steps[key] = step
    if not steps:
        return rows
    number = args.number or max(1, min(100, round(SAMPLE_SECONDS / max(min(one.values()), 1e-6))))
    rates = time_variants(steps, args.repeats, number, 0, 1, sync, events=cuda)
    for key, r in rates.items():
        ms = [1e3 / v for v in r]
        rows[key].update(ms=statistics.median(ms), ms_min=min(ms), samples_ms=ms, number=number)
    return rows


def add_ratios(rows: List[dict]) -> None:
    """× SDPA (time over the reference's, same T, mask and passes) and explicit / it."""
    def find(T, mask, scorer, backend, passes):
        return next((r for r in rows if (r["T"], r["mask"], r["scorer"], r["backend"], r["passes"])
                     == (T, mask, scorer, backend, passes) and "ms" in r), None)

    for r in rows:
        if "ms" not in r:
            continue
        ref = find(r["T"], r["mask"], "scaled_dot", "torch", r["passes"])
        expl = find(r["T"], r["mask"], r["scorer"], "explicit", r["passes"])
        r["ratio_sdpa"] = r["ms"] / ref["ms"] if ref else None
        r["speedup_vs_explicit"] = expl["ms"] / r["ms"] if expl else None


def goals(rows: List[dict], at_T: int) -> List[str]:
    """The goals for each flex row at T = ``at_T`` without a mask (none when T was not run)."""
    lines = []
    for r in rows:
        if r["backend"] != "flex" or r["T"] != at_T or r["mask"] != "none" or "ms" not in r:
            continue
        a, b = r.get("ratio_sdpa"), r.get("speedup_vs_explicit")
        ok_a = a is not None and a <= GOALS["flex_vs_sdpa_max"]
        ok_b = b is not None and b >= GOALS["flex_speedup_vs_explicit_min"]
        lines.append(f"{r['scorer']} flex at T={at_T} ({r['passes']}): × SDPA {_f(a, '.2f')} "
                     f"({'met' if ok_a else 'not met'}, ≤ 1.5); explicit / flex {_f(b, '.1f')} "
                     f"({'met' if ok_b else 'not met'}, ≥ 3)")
    return lines


def _f(v, fmt: str) -> str:
    return "" if v is None else format(v, fmt)


def print_table(report: dict) -> None:
    c = report["config"]
    print(f"\nattention fwd+bwd (pass fwd: forward only), ms per step (median of {report['args']['repeats']}); "
          f"B={c['batch']}, d={c['d_model']}, {c['heads']} heads, {c['dtype']} on "
          f"{report['machine'].get('gpu', report['args']['device'])}, torch {report['torch']}\n")
    print("| T | mask | scorer | backend | pass | ms | × SDPA | explicit / it | peak MiB | first call s | check |")
    print("|---:|---|---|---|---|---:|---:|---:|---:|---:|---|")
    for r in report["rows"]:
        chk = r.get("check", {})
        chk_s = chk.get("error", "") or " ".join(f"{k} {v:.0e}" for k, v in chk.items())
        if r.get("check_ok") is False:
            chk_s = "MISMATCH " + chk_s
        if "ms" not in r:
            print(f"| {r['T']} | {r['mask']} | {r['scorer']} | {r['backend']} | {r['passes']} | "
                  f"{r.get('error', '')[:80]} | | | | | {chk_s} |")
            continue
        print(f"| {r['T']} | {r['mask']} | {r['scorer']} | {r['backend']} | {r['passes']} | {r['ms']:.3f} | "
              f"{_f(r.get('ratio_sdpa'), '.2f')} | {_f(r.get('speedup_vs_explicit'), '.2f')} | "
              f"{r.get('peak_mib', '')} | {_f(r.get('first_call_s'), '.2f')} | {chk_s} |")
    for note in report["notes"]:
        print(f"\nnote: {note}")
    for line in report["goals"]:
        print(f"goal: {line}")


def main(argv: Optional[List[str]] = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default=None, help="cpu or cuda (default: cuda when there is one)")
    ap.add_argument("--seq-len", type=int, nargs="+", default=None, help="T values (default 512 2048)")
    ap.add_argument("--batch", type=int, default=None, help="B (default 16)")
    ap.add_argument("--d-model", type=int, default=None, help="d (default 768)")
    ap.add_argument("--heads", type=int, default=None, help="J (default 12)")
    ap.add_argument("--dtype", choices=sorted(DTYPES), default=None,
                    help="autocast dtype (default bf16 on cuda, fp32 on cpu)")
    ap.add_argument("--scorers", nargs="+", choices=SCORERS, default=list(SCORERS))
    ap.add_argument("--masks", nargs="+", choices=["none", "padding", "causal"], default=["none"],
                    help="none; padding (random lengths in [T/2, T]); causal")
    ap.add_argument("--repeats", type=int, default=10, help="timed samples per variant")
    ap.add_argument("--number", type=int, default=0, help="steps per sample (0: about 50 ms at the fastest)")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps per variant after its first call")
    ap.add_argument("--deadline", type=float, default=0,
                    help="seconds after which variants not yet checked or warmed up are skipped (0: none)")
    ap.add_argument("--tiny", action="store_true", help="B=2, T=64, d=64, 4 heads: a CPU smoke run")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", help="JSON path (default bench/results/gpu_attention-<UTC date>.json)")
    args = ap.parse_args(argv)
    sizes = TINY if args.tiny else dict(batch=16, seq_len=[512, 2048], d_model=768, heads=12)
    for k, v in sizes.items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    args.device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(args.device)
    args.dtype = args.dtype or ("bf16" if device.type == "cuda" else "fp32")
    dtype = DTYPES[args.dtype]
    # one compiled flex_attention per scorer, dtype and shape: more than dynamo's default 8
    for name, value in (("recompile_limit", 64), ("cache_size_limit", 64), ("accumulated_recompile_limit", 1024),
                        ("accumulated_cache_size_limit", 1024)):
        if hasattr(torch._dynamo.config, name):
            setattr(torch._dynamo.config, name, value)

    started, t_start = _dt.datetime.now(_dt.timezone.utc), time.monotonic()
    deadline = t_start + args.deadline if args.deadline else float("inf")
    notes = []
    pairs = plan(args.scorers)
    blocks = build_blocks(pairs, args.d_model, args.heads, device, args.seed)
    pairs = [("scaled_dot", "torch")] * (("scaled_dot", "torch") in blocks) + pairs
    fwd_only = {p for p in pairs if p[1] == "flex"} if device.type == "cpu" else set()
    if fwd_only:  # the CPU's flex is its unfused reference, as the block says: no warning each call
        warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
        notes.append("FlexAttention has no backward on the CPU (torch 2.13): flex is timed forward only "
                     "(pass fwd), against forward-only rows of the reference and the explicit path")
    variants = [(*p, "fwd+bwd") for p in pairs if p not in fwd_only and isinstance(blocks[p], nn.Module)]
    fwd_scorers = {p[0] for p in fwd_only}
    variants += [(s, b, "fwd") for s, b in pairs if (s, b) in fwd_only
                 or (fwd_scorers and b == "torch") or (s in fwd_scorers and b == "explicit")]
    variants = [v for v in variants if isinstance(blocks[v[:2]], nn.Module)]
    tol = 5e-2 if dtype != torch.float32 else (1e-3 if device.type == "cuda" else 1e-4)

    report = {
        "benchmark": "gpu_attention", "date": started.isoformat(timespec="seconds"),
        "command": " ".join([Path(sys.executable).name, *sys.argv]), "args": vars(args),
        "commit": git_commit(), "machine": machine(args.device), "python": platform.python_version(),
        "torch": torch.__version__,
        "config": {"batch": args.batch, "d_model": args.d_model, "heads": args.heads, "dtype": args.dtype,
                   "block": "multihead (concat_proj, softmax), self-attention, train mode, dropout 0"},
        "check_tolerance": tol, "goals_definition": GOALS, "notes": notes, "rows": [], "goals": [],
    }
    out = result_path("gpu_attention", started, args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    for p, v in blocks.items():
        if isinstance(v, str):
            report["rows"] += [{"T": T, "mask": m, "scorer": p[0], "backend": p[1], "passes": "", "error": v}
                               for T in args.seq_len for m in args.masks]
    for mask in args.masks:
        causal = mask == "causal"
        for T in args.seq_len:
            x, grad, keep = make_inputs(args.batch, T, args.d_model, mask, device, args.seed + 1)
            checked = check(blocks, pairs, x, keep, causal, dtype, fwd_only, deadline)
            timed = time_case(blocks, variants, x, grad, keep, causal, args, dtype, deadline)
            for (scorer, backend, passes), row in timed.items():
                c = checked.get((scorer, backend), {})
                d = {"error": c["error"]} if "error" in c else c.get("diff", {})
                ok = None if not d or "error" in d else all(v <= tol for v in d.values())
                report["rows"].append({"T": T, "mask": mask, "scorer": scorer, "backend": backend,
                                       "passes": passes, "first_call_s": c.get("first_call_s"), **row,
                                       "check": d, "check_ok": ok})
            del x, grad, keep, timed, checked
            if device.type == "cuda":
                torch.cuda.empty_cache()
            add_ratios(report["rows"])
            report["goals"] = goals(report["rows"], GOALS["at_T"])
            report["elapsed_s"] = round(time.monotonic() - t_start, 1)
            out.write_text(json.dumps(report, indent=2))
            print(f"T={T} mask={mask}: {len(variants)} variants timed ({report['elapsed_s']:.0f} s)",
                  file=sys.stderr, flush=True)
    bad = [r for r in report["rows"] if r.get("check_ok") is False]
    if bad:
        notes.append(f"{len(bad)} row(s) differ from the explicit path beyond {tol:g} (MISMATCH): "
                     "their times are of a different function")
    report["loadavg_end"] = os.getloadavg()[0]
    out.write_text(json.dumps(report, indent=2))
    print_table(report)
    print(f"\nwritten {out} ({report['elapsed_s']:.0f} s)")
    return report


if __name__ == "__main__":
    main()
