"""attnflow-predict for BERT runs: label texts (fine-tuned, ``task=text_classification``) or fill
their [MASK] tokens (pretrained, ``task=bert_pretraining``), and show the attention of ⟨CLS⟩.

Lines are encoded as in training (``[CLS] subwords [SEP]``, cut to ``data.max_len``); in a
pretraining run's input a literal ``[SEP]`` starts segment B. Fill-mask (as HF's ``fill-mask``
pipeline) prints the filled text, then per [MASK] its ``--top-k`` candidates as ``token:p``.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from typing import List, Sequence

import numpy as np
import torch

from attnflow.cli.predict_io import (PredictError, check_explain_html, label_all, label_line,
                                     read_texts, write_attention)
from attnflow.config.registry import MODELS
from attnflow.io.checkpoints import Run, load_weights
from attnflow.io.text import no_inputs
from attnflow.viz.figures import cls_rows


@dataclass
class BertRun:
    model: torch.nn.Module
    tokenizer: object
    itos: List[str]
    max_len: int
    class_names: List[str]  # [] for a pretraining run
    pretraining: bool


def load_bert(run: Run, device: str = "cpu") -> BertRun:
    """The run's BERT model with its weights, in eval mode, and its tokenizer."""
    from tokenizers import Tokenizer

    from attnflow.config.registry import DATA
    from attnflow.data.corpus import PAD, TOKENIZER_FILE

    cfg = run.config
    art = dict(run.ckpt.get("attnflow_artifacts") or {})
    saved = run.run_dir / "tokenizer" / TOKENIZER_FILE
    if saved.is_file():
        tok = Tokenizer.from_file(str(saved))
    elif art.get("tokenizer"):
        tok = Tokenizer.from_str(art["tokenizer"])
    else:
        raise PredictError(f"the run has no tokenizer: {saved} is missing and its checkpoint "
                           f"{run.checkpoint} carries none")
    pretraining = (cfg.get("task") or {}).get("name") == "bert_pretraining"
    names = [] if pretraining else [str(c) for c in art.get("class_names") or []]
    max_len = art.get("max_len") or DATA.validate(cfg["data"], "data").get("max_len")
    vocab = tok.get_vocab_size()
    model = MODELS.build(cfg["model"], vocab_size=vocab, pad_id=PAD, num_classes=len(names),
                         path="model")
    load_weights(model, run.ckpt["state_dict"], "model.",
                 f"model 'bert' (head {cfg['model'].get('head', 'pretraining')}, a vocabulary of "
                 f"{vocab} tokens, {len(names)} classes)")
    itos = [tok.id_to_token(i) for i in range(vocab)]
    max_len = min(int(max_len), model.max_len)  # the data's cap, within the model's positions
    return BertRun(model.eval().to(device), tok, itos, max_len, names, pretraining)


def encode(bert: BertRun, texts: Sequence[str]) -> List[dict]:
    """Per text: ``ids`` ``[CLS] subwords [SEP]`` cut to ``max_len`` (as the data modules'
    ``encode_texts``: the end is cut), ``segments`` (0, then 1 after the first inner [SEP] of a
    pretraining run's input), ``subwords`` (how many the text has) and ``cut`` (how many were cut)."""
    from attnflow.data.corpus import SEP
    from attnflow.data.text_classification import encode_texts

    full, _ = encode_texts(bert.tokenizer, texts, sys.maxsize)  # every subword: to count the cut
    out = []
    for ids in full:
        n = len(ids) - 2
        keep = ids if n <= bert.max_len - 2 else np.concatenate((ids[: bert.max_len - 1], [SEP]))
        seg = np.zeros(len(keep), np.int64)
        if bert.pretraining:  # [CLS] A [SEP] B [SEP]: B and the last [SEP] are segment 1
            seg = np.minimum(np.cumsum(np.concatenate(([0], keep[:-1] == SEP))), 1)
        out.append({"ids": keep, "segments": seg, "subwords": n, "cut": n - (len(keep) - 2)})
    return out


@torch.no_grad()
def forward(bert: BertRun, items: Sequence[dict]):
    """One padded batch through the model: (hidden (B, T, d), ⟨CLS⟩ attention (B, N, J, T), zero
    at padding, lengths (B,)). The maps are the encoder's own ``need_weights`` output, row 0."""
    from attnflow.data.pretraining import pad_rows

    device = next(bert.model.parameters()).device
    ids, real = pad_rows([it["ids"] for it in items])  # as the data modules' batches
    seg, _ = pad_rows([it["segments"] for it in items], 0)
    lens = real.sum(1)
    hidden, maps = bert.model(torch.from_numpy(ids).to(device), torch.from_numpy(seg).to(device),
                              torch.from_numpy(real).to(device), need_weights=True)
    return hidden, cls_rows(maps), torch.from_numpy(lens)


@torch.no_grad()
def predict_texts(bert: BertRun, texts: Sequence[str], top_k: int = 5) -> List[dict]:
    """Per text: ``tokens``, ``cls_attention`` (N, J, T) numpy, ``subwords``, ``cut``,
    ``empty``, and for classification ``label``, ``probability``, ``probabilities``; for
    fill-mask ``masks`` (per [MASK], the top-k {token, token_str, score}) and ``sequence``."""
    from attnflow.data.corpus import MASK
    from attnflow.viz.explain import join_pieces

    items = encode(bert, texts)
    results = [{"text": t, "empty": it["subwords"] == 0, "subwords": it["subwords"],
                "cut": it["cut"]} for t, it in zip(texts, items)]
    live = [i for i, r in enumerate(results) if not r["empty"]]
    if not live:
        return results
    hidden, cls, lens = forward(bert, [items[i] for i in live])
    if bert.pretraining:
        ids = [torch.as_tensor(items[i]["ids"]) for i in live]
        where = [torch.nonzero(x == MASK).flatten() for x in ids]
        b = torch.cat([torch.full((len(w),), k) for k, w in enumerate(where)])
        t = torch.cat(where)
        probs = torch.softmax(bert.model.mlm_logits(hidden[b, t]).float(), -1) if len(t) else None
        k = min(top_k, len(bert.itos))
        top = probs.topk(k, -1) if probs is not None else None
        start = 0
    else:
        probs = torch.softmax(bert.model.classify_logits(hidden).float(), -1).cpu()
    for row, i in enumerate(live):
        r, n = results[i], int(lens[row])
        tokens = [bert.itos[x] for x in items[i]["ids"].tolist()]
        r.update(tokens=tokens, cls_attention=cls[row, :, :, :n].cpu().numpy())
        if bert.pretraining:
            m = len(where[row])
            masks = [[{"token": int(tid), "token_str": bert.itos[int(tid)], "score": float(p)}
                      for tid, p in zip(top.indices[j].tolist(), top.values[j].tolist())]
                     for j in range(start, start + m)] if m else []
            start += m
            filled = list(tokens)
            for j, pos in enumerate(where[row].tolist()):
                filled[pos] = masks[j][0]["token_str"]
            r.update(masks=masks, sequence=join_pieces(filled, ("[PAD]", "[CLS]", "[SEP]")))
        else:
            p = probs[row]
            c = int(p.argmax())
            r.update(label=bert.class_names[c], probability=float(p[c]), index=c,
                     probabilities={name: float(v) for name, v in zip(bert.class_names, p.tolist())})
    return results


def cls_arrays(results: Sequence[dict], first: int) -> dict:
    """``--save-attention``'s arrays of texts numbered from ``first``: ``{i}/tokens`` and, but
    for an empty one, ``{i}/cls_attention`` (N, J, T)."""
    arrays = {}
    for i, r in enumerate(results, first):
        arrays[f"{i}/tokens"] = np.asarray(r.get("tokens", []), dtype=str)
        if not r["empty"]:
            arrays[f"{i}/cls_attention"] = r["cls_attention"]
    return arrays


def _title(r: dict, pretraining: bool) -> str:
    if not pretraining:
        return f"predicted {r['label']} (p={r['probability']:.3f})"
    fills = ", ".join(f"[MASK] {j + 1} → {m[0]['token_str']} (p={m[0]['score']:.3f})"
                      for j, m in enumerate(r["masks"]))
    return f"fills: {fills}" if fills else "no [MASK] to fill"


def _line(r: dict, args, pretraining: bool) -> str:
    """A text's output line: a classification's as a document's (:func:`attnflow.cli.predict_io.label_line`),
    a fill-mask's the filled text and each [MASK]'s candidates (JSON: sequence, masks, text)."""
    if not pretraining:
        return label_line(r, args.json)
    if r["empty"]:
        return (json.dumps({"sequence": None, "masks": None, "text": r["text"], "empty": True})
                if args.json else "-")
    if args.json:
        return json.dumps({k: r[k] for k in ("sequence", "masks", "text")})
    return "\t".join([r["sequence"], *(" ".join(f"{c['token_str']}:{c['score']:.4f}" for c in m)
                                       for m in r["masks"])])


def predict_bert(args, run: Run, out) -> int:
    """attnflow-predict on a BERT run (see the module docstring)."""
    bert = load_bert(run, args.device)
    pre = bert.pretraining
    check_explain_html(args, "texts")
    texts, where = read_texts(args, (run.config.get("data") or {}).get("text_field") or "text")
    limit, explained = bert.max_len - 2, []
    caps = f"{limit} subwords (the run's data.max_len={bert.max_len})"

    def step(chunk, first):
        results = predict_texts(bert, chunk, args.top_k or 5)
        explained.extend(r for r in results if args.explain and not r["empty"])
        return results, cls_arrays(results, first) if args.save_attention else {}

    def note(r, j):
        if pre and not r["masks"]:
            print(f"attnflow-predict: {where} {j} has no [MASK] to fill (written "
                  f"unchanged)", file=sys.stderr)
        msg = (f"has {r['subwords']} subwords; the model reads at most {limit} between [CLS] and "
               f"[SEP] (the run's data.max_len={bert.max_len}): {r['cut']} cut from its end")
        return msg if r["cut"] else None, r["subwords"], r["cut"]

    arrays, n = label_all(args, out, texts, where, step, lambda r: _line(r, args, pre), note,
                          what="texts", caps=caps + ": {cut} of {size} subwords",
                          empty=f"no words to {'fill' if pre else 'classify'} ('-' is written "
                                f"in its place)", none=no_inputs("texts", "--file", args.file))
    if args.explain:
        from attnflow.viz.explain import write_text_html
        from attnflow.viz.figures import cls_attention_figure, figure_png

        for r in explained:
            r["title"] = _title(r, pre)
            r["picture"] = figure_png(cls_attention_figure(r["cls_attention"], r["tokens"], r["title"]))
        path = write_text_html(args.explain, explained, "attnflow-predict: attention from [CLS]")
        print(f"explanation written to {path}", file=sys.stderr)
    if args.save_attention:
        write_attention(args.save_attention, arrays, "text", n, "texts")
    return 0
