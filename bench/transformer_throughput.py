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

Usage::

    python bench/transformer_throughput.py [--repeats 9] [--number 3] [--batch 64] [--src-len 24]
        [--tgt-len 24] [--threads N] [--out PATH]
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from attnflow.blocks.positional.sinusoidal import sinusoid_table
from attnflow.config.registry import MODELS
from timing import print_rates, time_variants, write_result

D, HEADS, FFN, LAYERS, DROPOUT, VOCAB, PAD = 256, 8, 1024, 3, 0.1, 8000, 0


class TorchPeer(nn.Module):
    """torch.nn.Transformer with attnflow's embedding/output layers (tied, √d, sinusoids)."""

    def __init__(self):
        super().__init__()
        self.embedding = nn.Embedding(VOCAB, D, padding_idx=PAD)
        nn.init.normal_(self.embedding.weight, 0.0, D ** -0.5)
        self.core = nn.Transformer(D, HEADS, LAYERS, LAYERS, FFN, DROPOUT, batch_first=True,
                                   norm_first=False)
        self.core.encoder.norm = None  # post-LN: no final LayerNorm (as attnflow)
        self.core.decoder.norm = None
        self.out = nn.Linear(D, VOCAB)
        self.out.weight = self.embedding.weight
        self.dropout = nn.Dropout(DROPOUT)
        self.register_buffer("pe", sinusoid_table(512, D), persistent=False)

    def embed(self, tokens):
        return self.dropout(self.embedding(tokens) * math.sqrt(D) + self.pe[: tokens.shape[1]])

    def forward(self, src, src_lengths, tgt_in):
        pad = torch.arange(src.shape[1]) >= src_lengths.unsqueeze(-1)  # True = ignore
        T = tgt_in.shape[1]
        causal = nn.Transformer.generate_square_subsequent_mask(T)
        h = self.core(self.embed(src), self.embed(tgt_in), tgt_mask=causal,
                      src_key_padding_mask=pad, memory_key_padding_mask=pad, tgt_is_causal=True)
        return self.out(h)


def build_attnflow():
    return MODELS.build({"name": "transformer", "d_model": D, "ffn_dim": FFN,
                         "attention": {"name": "multihead", "heads": HEADS, "dropout": DROPOUT},
                         "encoder_layers": LAYERS, "decoder_layers": LAYERS, "dropout": DROPOUT,
                         "activation_dropout": DROPOUT,
                         "norm": "post", "tie_embeddings": "all"},
                        src_vocab=VOCAB, tgt_vocab=VOCAB, pad_id=PAD)


def make_batch(B, S, T, seed=0):
    g = torch.Generator().manual_seed(seed)
    src_len = torch.randint(S // 2, S + 1, (B,), generator=g)
    src_len[0] = S
    tgt_len = torch.randint(T // 2, T + 1, (B,), generator=g)
    tgt_len[0] = T
    src = torch.randint(3, VOCAB, (B, S), generator=g).masked_fill(
        torch.arange(S) >= src_len.unsqueeze(-1), PAD)
    tgt = torch.randint(3, VOCAB, (B, T + 1), generator=g).masked_fill(
        torch.arange(T + 1) >= tgt_len.unsqueeze(-1) + 1, PAD)
    return src, src_len, tgt[:, :-1], tgt[:, 1:]


def step_fn(model, opt, batch, kind):
    src, src_len, tgt_in, tgt_out = batch

    def step():
        logits = model(src, src_len, tgt_in)
        if kind == "attnflow":
            logits = logits[0]
        loss = F.cross_entropy(logits.transpose(1, 2), tgt_out, ignore_index=PAD)
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
    args = step_args("transformer_throughput", 3).parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    torch.manual_seed(0)
    models = {"attnflow": build_attnflow().train(), "torch": TorchPeer().train()}
    params = {k: sum(p.numel() for p in m.parameters()) for k, m in models.items()}
    batch = make_batch(args.batch, args.src_len, args.tgt_len)
    tokens = int((batch[3] != PAD).sum())
    steps = {k: step_fn(m, torch.optim.Adam(m.parameters(), lr=1e-4), batch, k)
             for k, m in models.items()}
    load0 = os.getloadavg()[0]
    samples = time_variants(steps, args.repeats, args.number, 2, tokens)
    print(f"B={args.batch} S={args.src_len} T={args.tgt_len} target tokens/step={tokens} "
          f"d={D} heads={HEADS} ffn={FFN} layers={LAYERS}+{LAYERS} dropout={DROPOUT}")
    med = print_rates(samples, "model", {"params": {k: f"{n:,}" for k, n in params.items()}})
    paired = statistics.median(a / b for a, b in zip(samples["attnflow"], samples["torch"]))
    ratio = med["attnflow"] / med["torch"]
    print(f"ratio attnflow/torch = {ratio:.3f} (paired median {paired:.3f}); goal >= 0.95")
    write_result(args.out, "transformer_throughput", load0, args=vars(args), params=params,
                 tokens_per_step=tokens, tokens_per_s_median=med, samples=samples, ratio=ratio,
                 paired_ratio=paired)

if __name__ == "__main__":
    main()
