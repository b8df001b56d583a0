"""HTML renderings of attention. Documents as in Yang et al. 2016, Fig. 5: a red bar per sentence
weight, each word's background blue by word weight × √(sentence weight), relative to the maximum.
BERT texts: the ⟨CLS⟩ row of every layer and head over the WordPiece tokens, one table row each
plus the last layer's mean, with the all-heads picture embedded.
"""

from __future__ import annotations

import base64
import html
import math
import re
from pathlib import Path
from typing import List, Optional, Sequence

import numpy as np

from attnflow.io.text import write_text

STYLE = """<style>
body{font-family:system-ui,sans-serif;max-width:60em;margin:2em auto;line-height:1.6}
.doc{border:1px solid #ccc;border-radius:6px;padding:.8em 1em;margin:1.2em 0}
.head{font-weight:600;margin-bottom:.4em}.sent{display:flex;gap:.6em;align-items:flex-start}
.bar{flex:0 0 .8em;align-self:stretch;border-radius:2px}.w{padding:0 .12em;border-radius:3px}
.legend{color:#555;font-size:.9em}
</style>"""


def document_html(sentences: Sequence[Sequence[str]], word_weights: Sequence[Sequence[float]],
                  sent_weights: Optional[Sequence[float]], title: str) -> str:
    """One document as a <div>; weights are lists aligned with ``sentences``."""
    n = len(sentences)
    sw = list(sent_weights) if sent_weights is not None else [1.0] * n
    scaled = [[float(w) * math.sqrt(max(float(sw[i]), 0.0)) for w in word_weights[i][:len(s)]]
              for i, s in enumerate(sentences)]
    top = max([w for row in scaled for w in row] + [1e-12])
    stop = max([float(x) for x in sw] + [1e-12])
    rows = []
    for i, sent in enumerate(sentences):
        words = []
        for j, word in enumerate(sent):
            a = scaled[i][j] / top if j < len(scaled[i]) else 0.0
            words.append(f'<span class="w" style="background:rgba(30,90,220,{a:.3f})" '
                         f'title="{float(word_weights[i][j]) if j < len(word_weights[i]) else 0:.4f}">'
                         f"{html.escape(word)}</span>")
        bar = (f'<div class="bar" style="background:rgba(220,30,30,{float(sw[i]) / stop:.3f})" '
               f'title="sentence weight {float(sw[i]):.4f}"></div>') if sent_weights is not None else ""
        rows.append(f'<div class="sent">{bar}<div>{" ".join(words)}</div></div>')
    if not sentences:
        rows.append("<div><em>(empty document)</em></div>")
    return f'<div class="doc"><div class="head">{html.escape(title)}</div>{"".join(rows)}</div>'


def render_html(docs: List[dict], heading: str = "attention") -> str:
    """``docs``: dicts with sentences, word_weights, sent_weights (or None) and title."""
    body = "".join(document_html(d["sentences"], d["word_weights"], d.get("sent_weights"), d["title"])
                   for d in docs)
    legend = ('<p class="legend">red bar: sentence weight; blue: word weight × √(sentence weight), '
              "relative to the document's maximum (hover for the raw weight).</p>")
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(heading)}</title>"
            f"{STYLE}</head><body><h2>{html.escape(heading)}</h2>{legend}{body}</body></html>")


def write_html(path: Path | str, docs: List[dict], heading: str = "attention") -> Path:
    """Write the page atomically (a failure leaves an existing file as it was)."""
    write_text(path, render_html(docs, heading))
    return Path(path)


# -- BERT texts ------------------------------------------------------------------------------------
TEXT_STYLE = """<style>
.tbl{overflow-x:auto;margin:.5em 0}.tbl table{border-collapse:collapse;font-size:.85em}
.tbl th{font-weight:400;color:#555;text-align:right;padding:0 .6em 0 0;white-space:nowrap}
.tbl td{padding:.05em .25em;white-space:nowrap;border-left:2px solid #fff}
.tbl td.cont{border-left:2px dotted #999}.tbl tr.mean th{font-weight:600;color:#000}
.read{color:#333;margin:.3em 0}.allheads{max-width:100%}
</style>"""


_SPECIAL = re.compile(r"\[[A-Z]+\]")  # [CLS], [SEP], [MASK], [UNK], [PAD]: words of their own


def shown_piece(token: str) -> str:
    """A WordPiece token as displayed: a leading ``▁`` dropped, ``##`` kept."""
    return token[1:] if token.startswith("\u2581") and len(token) > 1 else token


def join_pieces(tokens: Sequence[str], skip: Sequence[str] = ("[PAD]",)) -> str:
    """The text the pieces spell (``##`` glued on, ``▁`` a space), ``skip`` tokens left out."""
    text = "".join(t[2:] if t.startswith("##") else f" {t} " if _SPECIAL.fullmatch(t) else t
                   for t in tokens if t not in skip)
    return " ".join(text.replace("\u2581", " ").split())


def text_html(tokens: Sequence[str], cls_attention, title: str, picture: Optional[bytes] = None) -> str:
    """One text as a <div>: ``cls_attention`` (N, J, T) over ``tokens``; ``picture``: PNG bytes."""
    w = np.asarray(cls_attention, dtype=float)
    N, J, T = w.shape if w.size else (0, 0, len(tokens))
    rows = [(f"layer {l + 1} head {j + 1}", w[l, j], "") for l in range(N) for j in range(J)]
    if N:
        rows.append((f"layer {N} mean of heads", w[-1].mean(0), "mean"))
    cells = [(' class="cont"' if t.startswith("##") else "", html.escape(shown_piece(t)))
             for t in tokens]
    body = []
    for label, row, kind in rows:  # rendering, not a training path
        top = max(float(row.max(initial=0.0)), 1e-12)
        # opacity as 8-digit hex: ~30 bytes a cell less than rgba() on pages of 10⁴+ cells
        tds = "".join(
            f'<td{cls} style="background:#1e5adc{round(255 * a / top):02x}'
            f'{";color:#fff" if a / top > 0.7 else ""}" title="{a:.4f}">{text}</td>'
            for (cls, text), a in zip(cells, row.tolist()))
        body.append(f'<tr class="{kind}"><th>{html.escape(label)}</th>{tds}</tr>')
    img = (f'<img class="allheads" alt="attention from [CLS], every layer and head" '
           f'src="data:image/png;base64,{base64.b64encode(picture).decode("ascii")}">'
           if picture else "")
    read = html.escape(join_pieces(tokens))
    return (f'<div class="doc"><div class="head">{html.escape(title)}</div>'
            f'<div class="read">read as: {read}</div>{img}'
            f'<div class="tbl"><table>{"".join(body)}</table></div></div>')


def render_text_html(texts: List[dict], heading: str = "attention from [CLS]") -> str:
    """``texts``: dicts with tokens, cls_attention (N, J, T), title and optionally picture (PNG)."""
    body = "".join(text_html(d["tokens"], d["cls_attention"], d["title"], d.get("picture"))
                   for d in texts)
    legend = ("<p class=\"legend\">each row: the attention of the [CLS] query over the tokens in one "
              "layer and head (the model's own weights, summing to 1 over the row), shaded relative "
              "to the row's largest weight (hover for the weight); the last row of each text is the "
              "mean over the last layer's heads. A dotted edge marks a ## piece continuing the word "
              "before it. The picture shows every layer and head on one colour scale.</p>")
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(heading)}</title>"
            f"{STYLE}{TEXT_STYLE}</head><body><h2>{html.escape(heading)}</h2>{legend}{body}"
            f"</body></html>")


def write_text_html(path: Path | str, texts: List[dict], heading: str = "attention from [CLS]") -> Path:
    """Write the page atomically (a failure leaves an existing file as it was)."""
    write_text(path, render_text_html(texts, heading))
    return Path(path)
