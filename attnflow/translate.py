"""``attnflow-translate``: translate sentences with a trained run directory or checkpoint.

    attnflow-translate outputs/2026-11-22/05-00-00 "Ein Mann schläft."     # sentences as arguments
    attnflow-translate run_dir -f sentences.de > out.en                       # a file, one per line
    echo "Zwei Hunde spielen." | attnflow-translate run_dir/checkpoints/last.ckpt --beam 5
    attnflow-translate run_dir "Ein Hund läuft." --attention alpha.png        # α heat map

A run directory holds ``config.yaml``, ``checkpoints/`` (the best checkpoint named in
``metrics.json`` is used, else ``last.ckpt``) and ``tokenizer/`` (written by the parallel-text
data module at training time). A checkpoint path works too: its config is read from the
checkpoint and its tokenizers from the run directory above ``checkpoints/``. Output: one line
per input line, detokenised. Decoding: greedy with ``--beam 1``, else batched beam search with
the GNMT length penalty ``--length-penalty``. Errors (a bad path, a missing input file) print one
message and exit with status 2; an empty input line is reported on stderr and gives an empty
output line, so output lines stay aligned with input lines.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import List, Optional, Tuple

import torch
import yaml

from attnflow.checkpoints import CheckpointError, find_checkpoint, read_checkpoint, upgrade_config


class TranslateError(Exception):
    """A problem the user can fix; printed as one line."""


def load(path: Path, device: str = "cpu"):
    """(model, data module, config) from a run directory or checkpoint."""
    import attnflow  # noqa: F401  (the ${attnflow_root:} resolver of conf/paths)
    from attnflow.registry import DATA, MODELS

    try:
        ckpt_path, run_dir = find_checkpoint(path)
        ckpt = read_checkpoint(ckpt_path, device)
    except CheckpointError as err:
        raise TranslateError(str(err)) from None
    cfg = ckpt.get("attnflow_config") or None
    if not cfg and (run_dir / "config.yaml").is_file():
        cfg = yaml.safe_load((run_dir / "config.yaml").read_text())
    if not cfg:
        raise TranslateError(f"{ckpt_path} carries no attnflow config and {run_dir}/config.yaml is missing")
    cfg = upgrade_config(cfg)
    if cfg["data"].get("name") != "parallel":
        raise TranslateError(f"the run at {run_dir} is not a translation run (data '{cfg['data'].get('name')}')")
    dm = DATA.build(cfg["data"], path="data")
    try:
        dm.load_tokenizers(run_dir / "tokenizer")
    except FileNotFoundError as err:
        raise TranslateError(f"{err} — the tokenizers are saved in <run dir>/tokenizer/ by training") from None
    model = MODELS.build(cfg["model"], path="model", **dm.model_context())
    state = {k[len("model."):]: v for k, v in ckpt["state_dict"].items() if k.startswith("model.")}
    model.load_state_dict(state)
    return model.to(device).eval(), dm, cfg


def read_inputs(args) -> Tuple[List[str], str]:
    if args.sentences:
        return list(args.sentences), "argument"
    if args.file:
        p = Path(args.file)
        if not p.is_file():
            raise TranslateError(f"no such input file: {p}")
        return p.read_text(encoding="utf-8").splitlines(), f"{p} line"
    return sys.stdin.read().splitlines(), "stdin line"


@torch.no_grad()
def translate(model, dm, lines: List[str], beam: int = 1, length_penalty: float = 0.6,
              max_len: Optional[int] = None, need_weights: bool = False, batch_size: int = 64):
    """Translations of ``lines`` (and per sentence (α (T, S), source tokens, output tokens))."""
    from attnflow.data.parallel import BOS, EOS, PAD, collate
    from attnflow.decoding import decode
    from attnflow.tasks.seq2seq import strip_after_eos

    max_len = max_len or dm.max_decode_len
    device = next(model.parameters()).device
    ids = dm.encode_source(lines)
    out, maps = [""] * len(lines), [None] * len(lines)
    order = [i for i in sorted(range(len(lines)), key=lambda i: len(ids[i])) if ids[i]]
    for start in range(0, len(order), batch_size):
        chunk = order[start : start + batch_size]
        batch = {k: v.to(device) for k, v in collate([(i, ids[i], []) for i in chunk]).items()}
        pred, w = decode(model, batch["src"], batch["src_lengths"], BOS, EOS, max_len, beam,
                         length_penalty, need_weights)
        pred = strip_after_eos(pred, EOS, PAD)
        for r, i in enumerate(chunk):
            row = [t for t in pred[r].tolist() if t != PAD]
            out[i] = dm.detokenize(row)
            if need_weights and w is not None:
                S = len(ids[i])
                maps[i] = (w[r, : len(row), :, :S].mean(1).float().cpu(), [dm.src_tok.id_to_token(t) for t in ids[i]],
                           [dm.tgt_tok.id_to_token(t) for t in row])
    return out, maps


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="attnflow-translate", description=__doc__.split("\n\n")[0])
    ap.add_argument("run", help="a run directory (attnflow-train output) or a .ckpt file")
    ap.add_argument("sentences", nargs="*", help="sentences to translate (else -f FILE, else stdin)")
    ap.add_argument("-f", "--file", help="a text file, one sentence per line")
    ap.add_argument("--beam", type=int, default=1, help="beam size; 1 = greedy (default 1)")
    ap.add_argument("--length-penalty", type=float, default=0.6, help="GNMT α (default 0.6)")
    ap.add_argument("--max-len", type=int, default=None, help="longest output in subwords")
    ap.add_argument("--attention", metavar="OUT.png",
                    help="write the α heat map of the first sentence (more sentences: OUT_1.png, …)")
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args(argv)
    try:
        if args.beam < 1:
            raise TranslateError(f"--beam must be >= 1, got {args.beam}")
        lines, where = read_inputs(args)
        model, dm, _ = load(Path(args.run), args.device)
        for n, line in enumerate(lines, 1):
            if not line.strip():
                print(f"attnflow-translate: {where} {n} is empty: nothing to translate "
                      f"(an empty line is written in its place)", file=sys.stderr)
        out, maps = translate(model, dm, lines, args.beam, args.length_penalty, args.max_len,
                              need_weights=bool(args.attention))
        for line in out:
            print(line)
        if args.attention:
            from attnflow.viz import save_attention_png

            base = Path(args.attention)
            written = 0
            for i, m in enumerate(maps):
                if m is None:
                    continue
                p = base if written == 0 else base.with_name(f"{base.stem}_{i}{base.suffix or '.png'}")
                save_attention_png(p, m[0], m[1], m[2], f"α: {lines[i][:60]}")
                written += 1
            if not written:
                print("attnflow-translate: no heat map written: this model has no attention "
                      "(or every input line was empty)", file=sys.stderr)
    except TranslateError as err:
        print(f"attnflow-translate: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
