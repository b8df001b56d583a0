"""HTML renderings of document attention, as in Figure 5 of Yang et al. 2016: each sentence gets
a red bar whose intensity is its sentence weight, each word a blue background whose intensity is
its word weight (scaled by √ of its sentence's weight, as in the paper, then by the document's
maximum so the strongest word is fully coloured).

Used by the classification task (validation renderings in ``<run dir>/renderings/``) and by
``attnflow-predict --explain out.html``.
"""

from __future__ import annotations

import html
import math
from pathlib import Path
from typing import List, Optional, Sequence

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
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_html(docs, heading), encoding="utf-8")
    return path
