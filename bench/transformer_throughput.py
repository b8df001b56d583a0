"""Training throughput of attnflow's `transformer` model against torch.nn.Transformer.

Both models have identical sizes: d=256, 8 heads, FFN 1024, 3+3 layers, post-LN, batch-first,
dropout 0.1 everywhere torch puts it (residuals, attention weights, after the FFN's ReLU; attnflow
with ``attention.dropout=0.1, activation_dropout=0.1``), no final LayerNorm (torch's
``encoder.norm`` / ``decoder.norm`` removed: the paper's post-LN stack has none), and the same
embedding/output layers: one shared embedding matrix (src, tgt, output; tied), scaled by √d, plus
sinusoidal positions, and an output bias. Both see the same batch of random tokens with random
source lengths (padding masked: attnflow bool masks, torch ``src_key_padding_mask`` and
``memory_key_padding_mask``; target self-attention causal), the same cross-entropy loss (padding
ignored) and Adam.

One sample = ``number`` training steps (forward + backward + optimizer step) timed with
``time.perf_counter``; the two models alternate (order reversed every other repetition) and the
median per model is reported as target tokens per second (non-padding target tokens). The figure
to read is the ratio attnflow / torch from the same run (goal ≥ 0.95).

On a GPU (``--device cuda``, ``--bf16`` for bf16 autocast) each sample is timed with CUDA events;
``--preset base`` takes ``experiment=mt_transformer_base``'s sizes (d=512, 8 heads, FFN 2048, 6+6
layers, its shared 10,000-token vocabulary; ≈ 44M weights) and ``--compile`` adds
``attnflow+compile``: the same model under ``torch.compile`` (its first step, the compilation, is
reported apart and not timed).

Usage::

    python bench/transformer_throughput.py [--repeats 9] [--number 3] [--batch 64] [--src-len 24]
        [--tgt-len 24] [--threads N] [--out PATH] [--device cuda] [--bf16] [--preset base] [--compile]
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from attnflow.blocks.positional.sinusoidal import sinusoid_table
from attnflow.config.registry import MODELS
from timing import git_commit, machine, print_rates, time_variants, write_result

DROPOUT, PAD = 0.1, 0
# d, heads, FFN, layers per side, vocabulary: the CPU transformer's, and experiment=mt_transformer_base's
# (model=transformer_base with mt_transformer's shared 10,000-token vocabulary)
# (model=transformer_base with mt_transformer's shared 10,000-token vocabulary); tiny: a smoke run
PRESETS = {"cpu": dict(d=256, heads=8, ffn=1024, layers=3, vocab=8000),
           "base": dict(d=512, heads=8, ffn=2048, layers=6, vocab=10000),
           "tiny": dict(d=64, heads=4, ffn=128, layers=1, vocab=1000)}
CPU = PRESETS["cpu"]
VOCAB = CPU["vocab"]


class TorchPeer(nn.Module):
    """torch.nn.Transformer with attnflow's embedding/output layers (tied, √d, sinusoids)."""

    def __init__(self, sizes: dict = CPU):
        super().__init__()
        d, vocab, layers = sizes["d"], sizes["vocab"], sizes["layers"]
        self.d = d
        self.embedding = nn.Embedding(vocab, d, padding_idx=PAD)
        nn.init.normal_(self.embedding.weight, 0.0, d ** -0.5)
        self.core = nn.Transformer(d, sizes["heads"], layers, layers, sizes["ffn"], DROPOUT,
                                   batch_first=True, norm_first=False)
        self.core.encoder.norm = None  # post-LN: no final LayerNorm (as attnflow)
        self.core.decoder.norm = None
        self.out = nn.Linear(d, vocab)
        self.out.weight = self.embedding.weight
        self.dropout = nn.Dropout(DROPOUT)
        self.register_buffer("pe", sinusoid_table(512, d), persistent=False)

    def embed(self, tokens):
        return self.dropout(self.embedding(tokens) * math.sqrt(self.d) + self.pe[: tokens.shape[1]])

    def forward(self, src, src_lengths, tgt_in):
        pad = torch.arange(src.shape[1], device=src.device) >= src_lengths.unsqueeze(-1)  # True = ignore
        T = tgt_in.shape[1]
        causal = nn.Transformer.generate_square_subsequent_mask(T, device=src.device)
        h = self.core(self.embed(src), self.embed(tgt_in), tgt_mask=causal,
                      src_key_padding_mask=pad, memory_key_padding_mask=pad, tgt_is_causal=True)
        return self.out(h)


def build_attnflow(sizes: dict = CPU):
    return MODELS.build({"name": "transformer", "d_model": sizes["d"], "ffn_dim": sizes["ffn"],
                         "attention": {"name": "multihead", "heads": sizes["heads"], "dropout": DROPOUT},
                         "encoder_layers": sizes["layers"], "decoder_layers": sizes["layers"],
                         "dropout": DROPOUT, "activation_dropout": DROPOUT,
                         "norm": "post", "tie_embeddings": "all"},
                        src_vocab=sizes["vocab"], tgt_vocab=sizes["vocab"], pad_id=PAD)


def make_batch(B, S, T, seed=0, vocab=VOCAB):
    g = torch.Generator().manual_seed(seed)
    src_len = torch.randint(S // 2, S + 1, (B,), generator=g)
    src_len[0] = S
    tgt_len = torch.randint(T // 2, T + 1, (B,), generator=g)
    tgt_len[0] = T
    src = torch.randint(3, vocab, (B, S), generator=g).masked_fill(
        torch.arange(S) >= src_len.unsqueeze(-1), PAD)
    tgt = torch.randint(3, vocab, (B, T + 1), generator=g).masked_fill(
        torch.arange(T + 1) >= tgt_len.unsqueeze(-1) + 1, PAD)
    return src, src_len, tgt[:, :-1], tgt[:, 1:]


def step_fn(model, opt, batch, kind, bf16: bool = False):
    src, src_len, tgt_in, tgt_out = batch
    device = src.device

    def step():
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            logits = model(src, src_len, tgt_in)
            if kind.startswith("attnflow"):
                logits = logits[0]
            loss = F.cross_entropy(logits.float().transpose(1, 2), tgt_out, ignore_index=PAD)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return step


def step_args(name: str, number: int) -> argparse.ArgumentParser:
    """The options of a training-step benchmark: repeats, steps per sample, the batch's shape,
    threads, the JSON file (``bench/results/<name>.json``)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--number", type=int, default=number, help="training steps per timed sample")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--src-len", type=int, default=24)
    ap.add_argument("--tgt-len", type=int, default=24)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / f"{name}.json"))
    return ap


def main():
    ap = step_args("transformer_throughput", 3)
    ap.add_argument("--device", default="cpu", help="cpu or cuda (samples timed with CUDA events)")
    ap.add_argument("--bf16", action="store_true", help="bf16 autocast (trainer.precision=bf16-mixed)")
    ap.add_argument("--preset", choices=sorted(PRESETS), default="cpu",
                    help="sizes: cpu (d=256, 3+3 layers), base (mt_transformer_base: d=512, 6+6), tiny")
    ap.add_argument("--compile", action="store_true", help="also attnflow's model under torch.compile")
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps per model")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    sizes, device = PRESETS[args.preset], torch.device(args.device)
    cuda = device.type == "cuda"

    builders = {"attnflow": lambda: build_attnflow(sizes), "torch": lambda: TorchPeer(sizes)}
    if args.compile:
        builders["attnflow+compile"] = lambda: torch.compile(build_attnflow(sizes))
    models = {}
    for k, build in builders.items():
        torch.manual_seed(0)
        models[k] = build().to(device).train()
    params = {k: sum(p.numel() for p in m.parameters()) for k, m in models.items()}
    batch = tuple(t.to(device) for t in make_batch(args.batch, args.src_len, args.tgt_len, vocab=sizes["vocab"]))
    tokens = int((batch[3] != PAD).sum())
    steps = {k: step_fn(m, torch.optim.Adam(m.parameters(), lr=1e-4), batch, k, args.bf16)
             for k, m in models.items()}
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    first, failed = {}, {}
    for k, step in list(steps.items()):  # the first step apart: torch.compile compiles in it
        sync()
        t0 = time.perf_counter()
        try:
            step()
        except Exception as err:  # a compiler missing or failing: the eager figures still count
            if k != "attnflow+compile":
                raise
            failed[k] = f"{type(err).__name__}: {str(err)[:300]}"
            print(f"{k} dropped, its first step failed: {failed[k]}")
            del steps[k], models[k], params[k]
            continue
        sync()
        first[k] = round(time.perf_counter() - t0, 2)
    load0 = os.getloadavg()[0]
    samples = time_variants(steps, args.repeats, args.number, max(0, args.warmup - 1), tokens, sync,
                            events=cuda)
    print(f"{args.preset}: B={args.batch} S={args.src_len} T={args.tgt_len} target tokens/step={tokens} "
          f"d={sizes['d']} heads={sizes['heads']} ffn={sizes['ffn']} layers={sizes['layers']}+{sizes['layers']} "
          f"V={sizes['vocab']} dropout={DROPOUT} {'bf16' if args.bf16 else 'fp32'} on {args.device}")
    med = print_rates(samples, "model", {"params": {k: f"{n:,}" for k, n in params.items()},
                                         "first s": {k: f"{v:.1f}" for k, v in first.items()}},
                      width=18)
    paired = statistics.median(a / b for a, b in zip(samples["attnflow"], samples["torch"]))
    ratio = med["attnflow"] / med["torch"]
    print(f"ratio attnflow/torch = {ratio:.3f} (paired median {paired:.3f}); goal >= 0.95")
    extra = {}
    if failed:
        extra["failed"] = failed
    elif args.compile:
        extra["compile_speedup"] = med["attnflow+compile"] / med["attnflow"]
        print(f"attnflow+compile / attnflow = {extra['compile_speedup']:.3f} "
              f"(compiling: {first['attnflow+compile']:.0f} s)")
    write_result(args.out, "transformer_throughput", load0, args=vars(args), sizes=sizes, params=params,
                 tokens_per_step=tokens, tokens_per_s_median=med, samples=samples, ratio=ratio,
                 paired_ratio=paired, first_step_s=first, machine=machine(args.device),
                 commit=git_commit(), **extra)


if __name__ == "__main__":
    main()
