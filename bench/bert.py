"""Pretraining speed of attnflow's ``bert`` (bert_mini) against HF transformers' BertForPreTraining.

Issue 11, Benchmark §1. Both models have the identical configuration (Devlin et al. 2019's BERT at
bert_mini's sizes): vocabulary V (8,000 and 30,522 by default), d=256, N=4 layers, J=4 heads, FFN
1024 with the exact (erf) GELU (HF ``hidden_act="gelu"`` is ``F.gelu``, as attnflow's ``gelu``),
post-LN, LayerNorm ε=1e-5 (attnflow's ``nn.LayerNorm`` default; HF's 1e-12 is set to it), 512
learned positions, 2 segment types, the MLM decoder tied to the token embeddings (own bias), the
pooler + NSP head. Same number of parameters (printed).

Dropout 0.1 at the same places in both. HF applies ``hidden_dropout_prob`` to the embeddings (after
their LayerNorm) and to both residual branches, ``attention_probs_dropout_prob`` to the attention
probabilities, and none after the FFN's GELU. attnflow's ``bert`` applies ``model.dropout`` to the
embeddings (the encoder's dropout, after ``embedding_norm``) and to both residual branches, the
attention block's ``dropout`` to α, and ``model.activation_dropout`` after the GELU. bert_mini's
preset leaves ``attention.dropout`` at 0.0 and ``activation_dropout`` at 0.0, so here attnflow gets
``attention.dropout=0.1`` (HF's 0.1) and ``activation_dropout=0`` (HF has none).

Both see the same batch: B=32 pairs ``[CLS] A [SEP] B [SEP]`` of random tokens built and masked by
attnflow's own pipeline (``attnflow.data.pretraining.pack_pairs`` and ``mask_tokens``: 15% of the
non-special tokens selected, 80/10/10, labels −100 elsewhere), lengths as the data module makes them
(the longest, T=128, except with probability ``short_seq_prob`` = 0.1 a random shorter one; padded
to the longest; the padding masked), random NSP labels. One step = forward, MLM + NSP loss, backward,
AdamW (lr 1e-4, weight decay 0.01, torch's default ``foreach`` implementation) on both.

Variants (alternating in one process, order reversed every other repetition):

- ``attnflow``: ``BertPretrainingTask.losses`` (the training step's code: it applies the MLM
  output layer only at the selected positions, ~15% of the tokens; that is attnflow's design),
  loss = mlm_loss + nsp_loss.
- ``hf``: ``BertForPreTraining(input_ids, attention_mask, token_type_ids, labels,
  next_sentence_label).loss`` as a user calls it: HF computes the (B, T, V) MLM logits at every
  position, and the loss ignores the −100 ones.
- ``hf_sel``: HF given the same advantage: ``model.bert(...)`` then ``model.cls.predictions`` on
  ``last_hidden_state[labels != -100]`` and ``model.cls.seq_relationship`` on the pooled output,
  the same two cross-entropies. The same function, the same weights as ``hf``.

HF runs with its default attention implementation, ``sdpa`` (``torch.nn.functional.
scaled_dot_product_attention``; checked at start), random weights from a ``BertConfig`` (no model
is downloaded).

Before timing, attnflow's weights are copied into the HF models (:func:`copy_to_hf`) and, dropout
off, the hidden states (real tokens), MLM logits at the selected positions, NSP logits, the loss and
every parameter's gradient are compared (atol 1e-4); the script stops if they differ. The same
check runs in tests/test_bench_bert_equivalence.py (skipped when transformers is not installed).

One sample = ``--number`` steps timed with ``time.perf_counter``; the median per variant gives
tokens/s (non-padding input tokens per second); the ratio attnflow / HF (goal ≥ 1.0) at each
``--threads`` (``torch.set_num_threads``); the JSON also has the paired ratio (median of the
per-repetition ratios). Peak RSS: each variant in a fresh interpreter (this script with
``--rss-child``, started by ``subprocess``: a new process image, not a forked copy of this one) that
builds its model alone, runs ``--rss-steps`` steps and reports its peak RSS (``VmHWM``, not
``ru_maxrss``, which Linux carries over from the parent across fork + exec: :func:`rss_child`), and
its RSS after the imports, before the model exists (the same for all: with transformers installed,
attnflow's imports already load it, through Lightning/torchmetrics). The children run after the
timing, ``--rss-jobs`` (2) at a time, one thread each: a peak RSS does not depend on what else runs.

Usage (the project's environment with ``pip install -e ".[bench]"``)::

    python bench/bert.py                                   # V 8000 and 30522, 1 and 2 threads, RSS
    python bench/bert.py --repeats 3 --number 1 --vocab 8000 --threads 1 --no-rss   # a quick look
    python bench/bert.py --variants attnflow hf_sel --profile attnflow              # profiler table
    python bench/bert.py --device cuda --preset base     # BERT-base step in bf16, MFU: bench/bert_gpu.py

Results: a table on stdout, JSON in bench/results/bert-<UTC date>.json (machine, versions, commit).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Dict, List

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/timing.py, also when loaded by path
from timing import cpu_model, git_commit, result_path, time_variants  # noqa: E402

import numpy as np
import torch
import torch.nn.functional as F

from attnflow.data.corpus import SPECIALS
from attnflow.data.pretraining import IGNORE, mask_tokens, pack_pairs
from attnflow.config.registry import MODELS
from attnflow.models import bert_hf
from attnflow.tasks.bert_pretraining import BertPretrainingTask

ROOT = Path(__file__).resolve().parent.parent
DROPOUT, LN_EPS, PAD, LR, WEIGHT_DECAY = 0.1, 1e-5, 0, 1e-4, 0.01
VARIANTS = ("attnflow", "hf", "hf_sel")


# -- the two models ---------------------------------------------------------------------------------
def attnflow_config(dropout: float = DROPOUT, d_model: int = 256, layers: int = 4, heads: int = 4,
                    ffn_dim: int = 1024, max_len: int = 512, type_vocab_size: int = 2) -> dict:
    """The ``model`` config: bert_mini's (``model=bert_mini``, a test checks it) with
    ``attention.dropout`` = ``dropout`` as HF's attention-probabilities dropout (docstring)."""
    return {"name": "bert", "d_model": d_model, "layers": layers, "ffn_dim": ffn_dim,
            "dropout": dropout, "activation_dropout": 0.0, "max_len": max_len,
            "type_vocab_size": type_vocab_size, "norm": "post", "activation": "gelu",
            "positional": {"name": "learned", "max_len": max_len},
            "attention": {"name": "multihead", "heads": heads, "dropout": dropout,
                          "scorer": {"name": "scaled_dot"}, "normalizer": {"name": "softmax"},
                          "aggregator": {"name": "concat_proj"}}}


def build_attnflow(vocab: int, dropout: float = DROPOUT, **sizes) -> torch.nn.Module:
    """attnflow's ``model=bert`` of :func:`attnflow_config`."""
    return MODELS.build(attnflow_config(dropout, **sizes), vocab_size=vocab, pad_id=PAD)


def build_hf(vocab: int, dropout: float = DROPOUT, d_model: int = 256, layers: int = 4,
             heads: int = 4, ffn_dim: int = 1024, max_len: int = 512, type_vocab_size: int = 2):
    """HF ``BertForPreTraining`` from a config (random weights), default (sdpa) attention."""
    from transformers import BertConfig, BertForPreTraining

    config = BertConfig(vocab_size=vocab, hidden_size=d_model, num_hidden_layers=layers,
                        num_attention_heads=heads, intermediate_size=ffn_dim, hidden_act="gelu",
                        hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout,
                        max_position_embeddings=max_len, type_vocab_size=type_vocab_size,
                        layer_norm_eps=LN_EPS, pad_token_id=PAD, initializer_range=0.02,
                        tie_word_embeddings=True)
    model = BertForPreTraining(config)
    if model.config._attn_implementation != "sdpa":
        raise SystemExit(f"bench/bert.py: HF chose attention '{model.config._attn_implementation}', "
                         f"not its default 'sdpa'")
    if model.cls.predictions.decoder.weight is not model.bert.embeddings.word_embeddings.weight:
        raise SystemExit("bench/bert.py: HF's MLM decoder is not tied to the word embeddings")
    return model


def attnflow_name(hf_name: str) -> str:
    """The attnflow ``bert`` tensor that HF's ``hf_name`` holds (KeyError when none does)."""
    name = bert_hf.attnflow_name(hf_name)
    if name is None:
        raise KeyError(f"no attnflow tensor for HF's {hf_name}")
    return name


@torch.no_grad()
def copy_to_hf(attnflow_model: torch.nn.Module, hf_model: torch.nn.Module) -> None:
    """Copy every weight of attnflow's ``bert`` into HF's ``BertForPreTraining``: every HF tensor
    gets one and every attnflow tensor is used (else an error names the first left over)."""
    ours = attnflow_model.state_dict()
    used = set()
    for name, t in hf_model.state_dict().items():
        if attnflow_name(name) not in ours:
            raise KeyError(f"HF's {name} is attnflow's {attnflow_name(name)}, which this model lacks")
        src = ours[attnflow_name(name)]
        if tuple(src.shape) != tuple(t.shape):
            raise ValueError(f"{name}: HF {tuple(t.shape)}, attnflow {tuple(src.shape)}")
        t.copy_(src)
        used.add(attnflow_name(name))
    tied = {ours[k].data_ptr() for k in used}  # mlm_decoder.weight is token_embedding.weight
    left = sorted(k for k in set(ours) - used if ours[k].data_ptr() not in tied)
    if left:
        raise ValueError(f"attnflow tensors with no HF counterpart: {left}")


# -- the batch and the steps ------------------------------------------------------------------------
def make_batch(vocab: int, batch: int = 32, seq_len: int = 128, short_seq_prob: float = 0.1,
               seed: int = 0) -> Dict[str, torch.Tensor]:
    """A pretraining batch as the data module makes it (module docstring), of random tokens."""
    rng = np.random.default_rng(seed)
    items = []
    for i in range(batch):
        n = seq_len - 3
        if i and rng.random() < short_seq_prob:
            n = int(rng.integers(2, n))
        len_a = int(rng.integers(1, n))
        toks = rng.integers(len(SPECIALS), vocab, n)
        items.append((i, toks[:len_a], toks[len_a:], int(rng.integers(0, 2))))
    b = pack_pairs(items)
    b["input_ids"], b["mlm_labels"] = mask_tokens(b["input_ids"], b["attention_mask"], vocab,
                                                  generator=torch.Generator().manual_seed(seed))
    return b


def attnflow_loss(task: BertPretrainingTask, b: Dict[str, torch.Tensor]) -> torch.Tensor:
    out = task.losses(b)
    return out["mlm_loss"] + out["nsp_loss"]


def hf_loss(model, b: Dict[str, torch.Tensor]) -> torch.Tensor:
    return model(input_ids=b["input_ids"], attention_mask=b["hf_mask"],
                 token_type_ids=b["segment_ids"], labels=b["mlm_labels"],
                 next_sentence_label=b["nsp_labels"]).loss


def hf_sel_loss(model, b: Dict[str, torch.Tensor]) -> torch.Tensor:
    out = model.bert(input_ids=b["input_ids"], attention_mask=b["hf_mask"],
                     token_type_ids=b["segment_ids"])
    selected = b["mlm_labels"] != IGNORE
    mlm = model.cls.predictions(out.last_hidden_state[selected])
    nsp = model.cls.seq_relationship(out.pooler_output)
    return F.cross_entropy(mlm, b["mlm_labels"][selected]) + F.cross_entropy(nsp, b["nsp_labels"])


def build_variant(kind: str, vocab: int, seed: int = 0, copy: bool = True, **sizes):
    """(module to train, loss function of a batch) of one variant, weights from ``seed``; with
    ``copy``, HF's are copied from attnflow's of the same seed, so all start from the same point
    (the RSS children build HF alone: ``copy=False``)."""
    torch.manual_seed(seed)
    if kind == "attnflow":
        task = BertPretrainingTask(build_attnflow(vocab, **sizes))
        return task, lambda b: attnflow_loss(task, b)
    hf = build_hf(vocab, **sizes)
    if copy:
        copy_to_hf(build_attnflow(vocab, **sizes), hf)
    return hf, (lambda b: hf_loss(hf, b)) if kind == "hf" else (lambda b: hf_sel_loss(hf, b))


def make_step(module: torch.nn.Module, loss_fn: Callable, b) -> Callable[[], None]:
    opt = torch.optim.AdamW(module.parameters(), lr=LR, weight_decay=WEIGHT_DECAY)

    def step():
        loss = loss_fn(b)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return step


# -- equivalence --------------------------------------------------------------------------------------
def check_equivalence(vocab: int, batch: Dict[str, torch.Tensor], atol: float = 1e-4, seed: int = 0,
                      **sizes) -> Dict[str, float]:
    """attnflow's bert and HF's BertForPreTraining with copied weights, dropout off: the largest
    absolute differences of hidden states (real tokens), MLM logits (selected positions), NSP
    logits, the loss (attnflow's task vs HF's ``.loss`` and ``hf_sel_loss``) and the gradients
    (every HF parameter vs its attnflow tensor). Raises AssertionError beyond ``atol``."""
    torch.manual_seed(seed)
    ours = build_attnflow(vocab, dropout=0.0, **sizes).train()  # train mode: dropout 0 anyway
    hf = build_hf(vocab, dropout=0.0, **sizes).train()
    copy_to_hf(ours, hf)
    task = BertPretrainingTask(ours)
    b = dict(batch, hf_mask=batch["attention_mask"].long())
    real, selected = b["attention_mask"], b["mlm_labels"] != IGNORE

    hidden = task(b)
    out = hf(input_ids=b["input_ids"], attention_mask=b["hf_mask"], token_type_ids=b["segment_ids"],
             labels=b["mlm_labels"], next_sentence_label=b["nsp_labels"], output_hidden_states=True)
    diffs = {
        "hidden": (hidden[real] - out.hidden_states[-1][real]).abs().max().item(),
        "mlm_logits": (ours.mlm_logits(hidden[selected]) - out.prediction_logits[selected]).abs().max().item(),
        "nsp_logits": (ours.nsp_logits(hidden) - out.seq_relationship_logits).abs().max().item(),
    }
    loss_ours = attnflow_loss(task, b)
    diffs["loss"] = abs(loss_ours.item() - out.loss.item())
    diffs["loss_hf_sel"] = abs(loss_ours.item() - hf_sel_loss(hf, b).item())
    loss_ours.backward()
    out.loss.backward()
    grads = dict(ours.named_parameters())
    diffs["grad"] = max((p.grad - grads[attnflow_name(n)].grad).abs().max().item()
                        for n, p in hf.named_parameters())
    bad = {k: v for k, v in diffs.items() if not v <= atol}
    if bad:  # not an assert: checked under python -O too
        raise AssertionError(f"attnflow and HF differ beyond {atol}: {bad}")
    return diffs


# -- measuring -----------------------------------------------------------------------------------------
def rss_child(kind: str, vocab: int, args) -> None:
    """In a fresh interpreter: RSS after the imports, then peak RSS after ``rss_steps`` steps (MiB).

    The peak is ``VmHWM`` (/proc/self/status), the high-water mark of this process image's own
    memory. ``getrusage(RUSAGE_SELF).ru_maxrss`` is not: Linux keeps it across fork and execve,
    so a child started by ``subprocess`` (vfork/fork, then exec) from this script's parent would
    report the parent's peak when larger (all three variants read the same 2 GB here)."""
    torch.set_num_threads(args.rss_threads)
    if kind != "attnflow":
        import transformers  # noqa: F401  (counted in the baseline)
    base = _vm_rss_mib()
    module, loss_fn = build_variant(kind, vocab, args.seed, copy=False)
    b = make_batch(vocab, args.batch, args.seq_len, seed=args.seed)
    b["hf_mask"] = b["attention_mask"].long()
    step = make_step(module.train(), loss_fn, b)
    for _ in range(args.rss_steps):
        step()
    print(json.dumps({"baseline_mib": base, "peak_mib": _vm_rss_mib("VmHWM")}))


def _vm_rss_mib(field: str = "VmRSS") -> float:
    """/proc/self/status's ``field`` (VmRSS: now, VmHWM: peak of this process image) in MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise SystemExit(f"bench/bert.py: no {field} in /proc/self/status (peak RSS needs Linux)")


def measure_rss(kind: str, vocab: int, args) -> Dict[str, float]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--rss-child", kind, "--vocab", str(vocab),
           "--batch", str(args.batch), "--seq-len", str(args.seq_len), "--seed", str(args.seed),
           "--rss-steps", str(args.rss_steps), "--rss-threads", str(args.rss_threads)]
    env = dict(os.environ, OMP_NUM_THREADS=str(args.rss_threads))
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    if proc.returncode:
        raise SystemExit(f"RSS child {kind} failed:\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def profile(step: Callable, rows: int = 25) -> str:
    from torch.profiler import ProfilerActivity, profile as tprofile

    step()
    with tprofile(activities=[ProfilerActivity.CPU], record_shapes=False) as prof:
        step()
    return prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=rows)


def main(argv: List[str] = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if any(a.split("=")[0] in ("--device", "--preset") for a in argv):
        from bert_gpu import main as step_main  # one preset's step on a device, with MFU
        return step_main(argv)
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="--device cpu|cuda or --preset base|mini|tiny: bench/bert_gpu.py "
                                        "instead (BERT-base on a GPU in bf16, MFU; its --help)")
    ap.add_argument("--vocab", type=int, nargs="+", default=[8000, 30522])
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS))
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=5, help="timed samples per variant")
    ap.add_argument("--number", type=int, default=1, help="training steps per timed sample")
    ap.add_argument("--warmup", type=int, default=1,
                    help="untimed steps per variant before the first thread count's samples")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-rss", dest="rss", action="store_false", help="skip the peak-RSS children")
    ap.add_argument("--rss-steps", type=int, default=2,
                    help="steps before reading the peak (the 2nd is the first with AdamW's state)")
    ap.add_argument("--rss-threads", type=int, default=1, help="threads of each RSS child")
    ap.add_argument("--rss-jobs", type=int, default=2,
                    help="RSS children run at once, after the timing (peak RSS is per process)")
    ap.add_argument("--profile", choices=VARIANTS, help="print torch.profiler's table of one step")
    ap.add_argument("--out", default=None, help="JSON path (default bench/results/bert-<UTC date>.json, "
                    "bert-<date>T<time>.json when that exists)")
    ap.add_argument("--rss-child", choices=VARIANTS, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.rss_child:
        return rss_child(args.rss_child, args.vocab[0], args)

    import transformers

    started, t_start = _dt.datetime.now(_dt.timezone.utc), time.perf_counter()
    load0 = os.getloadavg()[0]
    results = []
    for vocab in args.vocab:
        batch = make_batch(vocab, args.batch, args.seq_len, seed=args.seed)
        batch["hf_mask"] = batch["attention_mask"].long()
        tokens = int(batch["attention_mask"].sum())
        torch.set_num_threads(max(args.threads))
        try:
            diffs = check_equivalence(vocab, batch, seed=args.seed)
        except AssertionError as err:
            raise SystemExit(f"bench/bert.py: not timed, the two models compute different "
                             f"functions at V={vocab}: {err}") from None
        print(f"V={vocab}: attnflow = HF with copied weights, dropout off (max abs diff): "
              + ", ".join(f"{k} {v:.1e}" for k, v in diffs.items()))
        built = {k: build_variant(k, vocab, args.seed) for k in args.variants}
        params = {k: sum(p.numel() for p in m.parameters() if p.requires_grad) for k, (m, _) in built.items()}
        steps = {k: make_step(m.train(), fn, batch) for k, (m, fn) in built.items()}
        if args.profile:
            torch.set_num_threads(args.threads[0])
            print(profile(steps[args.profile]))
        for i, threads in enumerate(args.threads):
            torch.set_num_threads(threads)
            samples = time_variants(steps, args.repeats, args.number, args.warmup if i == 0 else 0,
                                    tokens)
            med = {k: statistics.median(v) for k, v in samples.items()}
            results.append({"vocab": vocab, "threads": threads, "tokens_per_step": tokens,
                            "batch_shape": list(batch["input_ids"].shape),
                            "mlm_positions": int((batch["mlm_labels"] != IGNORE).sum()),
                            "params": params, "samples": samples, "tokens_per_s_median": med,
                            "ratio": {k: med["attnflow"] / med[k] for k in med
                                      if k != "attnflow" and "attnflow" in med},
                            "paired_ratio": {k: statistics.median(
                                a / h for a, h in zip(samples["attnflow"], samples[k]))
                                for k in med if k != "attnflow" and "attnflow" in med},
                            "equivalence_max_abs_diff": diffs})
            _print_row(results[-1])
        del built, steps
    rss = {}
    if args.rss:
        jobs = [(k, vocab) for vocab in args.vocab for k in args.variants]
        with ThreadPoolExecutor(max(1, args.rss_jobs)) as pool:  # threads only wait on children
            peaks = list(pool.map(lambda job: measure_rss(*job, args), jobs))
        for (k, vocab), peak in zip(jobs, peaks):
            rss.setdefault(str(vocab), {})[k] = peak
        _print_rss(rss, args)
    _print_table(results, rss)
    result = {
        "benchmark": "bert", "date": started.isoformat(timespec="seconds"),
        "command": " ".join([Path(sys.executable).name, *sys.argv]), "args": vars(args),
        "commit": git_commit(), "machine": {"cpu": cpu_model(), "cpu_count": os.cpu_count(),
                                             "platform": platform.platform()},
        "python": platform.python_version(), "torch": torch.__version__,
        "transformers": transformers.__version__, "hf_attention": "sdpa",
        "loadavg_start": load0, "loadavg_end": os.getloadavg()[0],
        "results": results, "peak_rss_mib": rss, "elapsed_s": round(time.perf_counter() - t_start, 1),
    }
    out = result_path("bert", started, args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(f"written {out} ({result['elapsed_s']:.0f} s; load average {load0:.2f} -> "
          f"{result['loadavg_end']:.2f})")


def _print_row(r) -> None:
    med = r["tokens_per_s_median"]
    print(f"V={r['vocab']} threads={r['threads']}: " + ", ".join(
        f"{k} {v:,.0f} tok/s (min {min(r['samples'][k]):,.0f}, max {max(r['samples'][k]):,.0f})"
        for k, v in med.items()) + "".join(f"; attnflow/{k} {v:.2f}" for k, v in r["ratio"].items()),
        flush=True)


def _print_rss(rss, args) -> None:
    for vocab, per in rss.items():
        print(f"V={vocab} peak RSS ({args.rss_steps} steps, {args.rss_threads} thread(s)): " + ", ".join(
            f"{k} {v['peak_mib']:.0f} MiB (after imports {v['baseline_mib']:.0f})"
            for k, v in per.items()))


def _print_table(results, rss) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="BERT pretraining step (fwd + bwd + AdamW), tokens/s: median "
                        "(attnflow: MLM head at the selected positions; hf: at all; hf_sel: selected)")
    variants = list(results[0]["tokens_per_s_median"]) if results else []
    for col in ["V", "threads", *variants, *[f"attnflow/{k}" for k in variants if k != "attnflow"]]:
        table.add_column(col, justify="right")
    for r in results:
        table.add_row(str(r["vocab"]), str(r["threads"]),
                      *[f"{r['tokens_per_s_median'][k]:,.0f}" for k in variants],
                      *[f"{r['ratio'][k]:.2f}" for k in variants if k in r["ratio"]])
    for vocab, per in rss.items():
        table.add_row(str(vocab), "RSS MiB", *[f"{per[k]['peak_mib']:.0f}" if k in per else "" for k in variants])
    Console().print(table)


if __name__ == "__main__":
    main()
