"""Attention pictures (matplotlib, Agg) and the dashboard panels tasks hand to loggers.

Every picture has a fixed size in pixels, whatever the lengths it shows (W&B shows one key's
images side by side and scales mismatched sizes badly): fonts shrink instead. Seq2seq α
(Bahdanau et al. 2015, Fig. 3), HAN documents (Yang et al. 2016, Fig. 5), GAT neighbourhoods
(Veličković et al. 2018), BERT's ⟨CLS⟩ rows (Clark et al. 2019) and captions (Xu et al. 2015).
Panels are plain dicts for :func:`attnflow.viz.panels.log_panels`.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Optional, Sequence, Tuple

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

from attnflow.viz.explain import shown_piece  # noqa: E402

DPI = 100
HEATMAP_SIZE = (6.4, 6.4)      # inches: 640 × 640 pixels at DPI
DOCUMENT_SIZE = (12.0, 6.0)    # 1200 × 600
NEIGHBOURHOOD_SIZE = (9.0, 5.0)  # 900 × 500
TEXT_ATTENTION_SIZE = (12.0, 6.0)  # 1200 × 600


def _fontsize(n: int, room: float = 220.0, lo: float = 4.0, hi: float = 10.0) -> float:
    """A tick font size that fits ``n`` labels along an axis of a fixed-size figure."""
    return float(np.clip(room / max(n, 1), lo, hi))


def alpha_label(heads: int = 1, layer: Optional[Tuple[int, int]] = None,
                head: Optional[int] = None) -> str:
    """What a picture of α shows, read off the weights' shape (``heads``) and the decoder's
    ``weights_layer`` ((which, of how many), 1-based): "α" for a block's one attention, else e.g.
    "α (layer 3 of 3, mean over 8 heads)"; ``head`` (1-based) names one head instead of the
    mean. A mean over heads or one layer of several looks like any α: the label tells them apart."""
    parts = [f"layer {layer[0]} of {layer[1]}"] if layer else []
    if head is not None:
        parts.append(f"head {head} of {heads}")
    elif heads > 1:
        parts.append(f"mean over {heads} heads")
    return f"α ({', '.join(parts)})" if parts else "α"


def decoder_alpha_label(model, heads: int) -> str:
    """:func:`alpha_label` of an encoder–decoder's weights with ``heads`` heads, the layer from
    its decoder's ``weights_layer`` (None: a decoder with one attention)."""
    return alpha_label(heads, model.decoder.weights_layer)


def attention_figure(weights: torch.Tensor, source: Sequence[str], output: Sequence[str],
                     title: str = "", figsize=HEATMAP_SIZE, label: str = "α"):
    """α (rows: output tokens, columns: source tokens), darker = more weight; ``label`` (e.g.
    :func:`alpha_label`'s) names the colour bar."""
    w = weights.detach().float().cpu().numpy()
    fig, ax = plt.subplots(figsize=figsize, dpi=DPI)
    im = ax.imshow(w, cmap="Greys", vmin=0.0, vmax=1.0, aspect="auto", interpolation="nearest")
    ax.set_xticks(range(len(source)), labels=list(source), rotation=90,
                  fontsize=_fontsize(len(source)))
    ax.set_yticks(range(len(output)), labels=list(output), fontsize=_fontsize(len(output)))
    ax.set_xlabel("source")
    ax.set_ylabel("output")
    if title:
        ax.set_title(title, fontsize=9)
    fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04, label=label)
    fig.tight_layout()
    return fig


def save_attention_png(path: Path, weights: torch.Tensor, source: Sequence[str],
                       output: Sequence[str], title: str = "", label: str = "α") -> Path:
    """:func:`attention_figure` as a PNG file (its folders made)."""
    fig = attention_figure(weights, source, output, title, label=label)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def figure_to_array(fig) -> np.ndarray:
    """The figure's pixels (H, W, 3) uint8, exactly figsize × dpi; the figure is closed."""
    fig.canvas.draw()
    img = np.asarray(fig.canvas.buffer_rgba())[..., :3].copy()
    plt.close(fig)
    return img


# -- documents -------------------------------------------------------------------------------------
def document_figure(sentences: Sequence[Sequence[str]], word_weights: Sequence[Sequence[float]],
                    sent_weights: Optional[Sequence[float]], title: str = "",
                    max_sentences: int = 12, max_words: int = 20, figsize=DOCUMENT_SIZE):
    """One row per sentence, words shaded blue by word weight × √(sentence weight) relative to
    the maximum, a red bar per sentence weight (Yang et al. 2016, Fig. 5); at most the
    ``max_sentences`` heaviest sentences and ``max_words`` words around each one's heaviest."""
    n = len(sentences)
    sw = np.asarray(sent_weights if sent_weights is not None else [1.0] * n, dtype=float)
    heaviest = np.asarray([max(map(float, w[:len(s)]), default=0.0)
                           for s, w in zip(sentences, word_weights)], dtype=float)
    score = sw * np.sqrt(np.maximum(heaviest, 0.0)) if sent_weights is not None else heaviest
    rows = np.sort(np.argsort(-score, kind="stable")[:max_sentences]) if n else np.zeros(0, int)
    grid = np.full((max(len(rows), 1), max_words), np.nan)  # nan: no word there (drawn white)
    words = []
    for r, i in enumerate(rows):  # drawing only: at most max_sentences rows
        w = np.asarray(word_weights[i][: len(sentences[i])], dtype=float)
        start = int(np.clip(np.argmax(w) - max_words // 2, 0, max(len(w) - max_words, 0))) if len(w) else 0
        grid[r, : len(w[start:start + max_words])] = w[start:start + max_words] * np.sqrt(max(sw[i], 0.0))
        words.append(list(sentences[i][start:start + max_words]))
    grid = grid / max(np.nanmax(grid, initial=0.0), 1e-12)
    fig, (bar, ax) = plt.subplots(1, 2, figsize=figsize, dpi=DPI,
                                  gridspec_kw={"width_ratios": [1, 30], "wspace": 0.02})
    bar.imshow((sw[rows] / max(sw.max(), 1e-12))[:, None] if len(rows) else np.zeros((1, 1)),
               cmap="Reds", vmin=0, vmax=1, aspect="auto")
    bar.set_xticks([])
    bar.set_yticks(range(len(rows)), labels=[f"s{i + 1} {sw[i]:.2f}" if sent_weights is not None
                                             else f"s{i + 1}" for i in rows], fontsize=7)
    blues = matplotlib.colormaps["Blues"].with_extremes(bad="white")
    ax.imshow(grid, cmap=blues, vmin=0, vmax=1.25, aspect="auto")  # 1.25: text stays legible
    for r, row in enumerate(words):
        for c, word in enumerate(row):
            ax.text(c, r, word if len(word) <= 10 else word[:9] + "…", ha="center", va="center",
                    fontsize=6.5, color="white" if grid[r, c] > 0.7 else "black")
    if not len(rows):
        ax.text(max_words / 2, 0, "(empty document)", ha="center", va="center")
    ax.set_xticks([])
    ax.set_yticks([])
    ax.set_title(title, fontsize=9)
    fig.subplots_adjust(left=0.08, right=0.99, top=0.93, bottom=0.02)
    return fig


# -- graphs ---------------------------------------------------------------------------------------
def neighbourhood_figure(alphas: Sequence[np.ndarray], labels: Sequence[str], title: str = "",
                         figsize=NEIGHBOURHOOD_SIZE):
    """Per layer a (heads × neighbours) heat map of α_tj (Veličković et al. 2018, eq. 3);
    ``alphas[l]`` (K, J_l), ``labels`` the K neighbours; colours from 0 to the largest α."""
    if not len(labels):  # an isolated node (a model without self-loops)
        fig, ax = plt.subplots(figsize=figsize, dpi=DPI)
        ax.axis("off")
        ax.text(0.5, 0.5, "no incoming edges", ha="center", va="center")
        fig.suptitle(title, fontsize=9)
        return fig
    heights = [max(a.shape[1], 1) for a in alphas]
    top = max([float(np.max(a)) for a in alphas if np.size(a)] + [1e-6])  # many neighbours: small α
    fig, axes = plt.subplots(len(alphas), 1, figsize=figsize, dpi=DPI, squeeze=False,
                             gridspec_kw={"height_ratios": heights}, layout="constrained")
    for layer, (ax, a) in enumerate(zip(axes[:, 0], alphas)):
        im = ax.imshow(np.asarray(a, dtype=float).T, cmap="viridis", vmin=0.0, vmax=top,
                       aspect="auto", interpolation="nearest")
        ax.set_yticks(range(a.shape[1]), labels=[f"h{j + 1}" for j in range(a.shape[1])],
                      fontsize=_fontsize(a.shape[1], 60, 4, 8))
        ax.set_ylabel(f"layer {layer + 1}", fontsize=8)
        last = layer == len(alphas) - 1
        ax.set_xticks(range(len(labels)), labels=list(labels) if last else [], rotation=90,
                      fontsize=_fontsize(len(labels), 180, 4, 8))
    fig.colorbar(im, ax=axes[:, 0].tolist(), fraction=0.03, pad=0.01, label="α")
    fig.suptitle(title, fontsize=9)
    return fig


# -- texts (BERT) ----------------------------------------------------------------------------------
def cls_attention_figure(cls, tokens: Sequence[str], title: str = "", figsize=TEXT_ATTENTION_SIZE,
                         row_names: Optional[Sequence[str]] = None):
    """The ⟨CLS⟩ row of every layer's and head's attention, ``cls`` (N, J, T), as an (N·J) × T
    heat map; ``row_names``: the N·J rows' names (default ``L<l> h<j>``; e.g. one layer's mean
    over heads). Colours run from 0 to the largest weight: trained BERTs put most on [CLS] and
    [SEP] (Clark et al. 2019), which a fixed 0–1 scale would leave the only visible cells."""
    w = np.asarray(cls.detach().float().cpu() if isinstance(cls, torch.Tensor) else cls, dtype=float)
    N, J, T = w.shape
    rows = w.reshape(N * J, T)
    # fixed margins, not a layout engine: the same frame for every text
    fig = plt.figure(figsize=figsize, dpi=DPI)
    ax, bar = fig.add_axes((0.07, 0.17, 0.83, 0.76)), fig.add_axes((0.912, 0.17, 0.012, 0.76))
    im = ax.imshow(rows, cmap="viridis", vmin=0.0, vmax=max(float(rows.max(initial=0.0)), 1e-6),
                   aspect="auto", interpolation="nearest")
    step = max(1, -(-T // 80))  # at most 80 token labels along the axis
    shown = [(p if len(p) <= 12 else p[:11] + "…") for p in map(shown_piece, tokens)]
    ax.set_xticks(range(0, T, step), labels=shown[::step], rotation=90,
                  fontsize=_fontsize(-(-T // step), 400, 4, 9))
    if N * J <= 48 or row_names is not None:
        names = row_names or [f"L{l + 1} h{j + 1}" for l in range(N) for j in range(J)]
        ax.set_yticks(range(N * J), labels=list(names),
                      fontsize=_fontsize(N * J, 300, 4, 9))
    else:  # BERT-base and larger: one label per layer
        ax.set_yticks(range(0, N * J, J), labels=[f"L{l + 1}" for l in range(N)],
                      fontsize=_fontsize(N, 300, 4, 9))
    for l in range(1, N):
        ax.axhline(l * J - 0.5, color="white", linewidth=0.8)
    ax.set_ylabel("layer, head")
    ax.set_title(title, fontsize=9)
    fig.colorbar(im, cax=bar, label="attention from [CLS]")
    return fig


def cls_rows(maps: Sequence[torch.Tensor]) -> torch.Tensor:
    """(B, N, J, T): row 0 (⟨CLS⟩) of each layer's (B, J, T, T) (or (B, T, T)) attention."""
    return torch.stack([(m if m.dim() == 4 else m.unsqueeze(1))[:, :, 0] for m in maps], 1).float()


def cls_attention_panels(cls: torch.Tensor, tokens: Sequence[Sequence[str]], titles: Sequence[str],
                         file_stem: str) -> list:
    """One image panel per text (``val/attention/<i>``) of ``cls`` (B, N, J, T), padding cut."""
    return [image_panel(f"val/attention/{i}", cls_attention_figure(cls[i, :, :, : len(toks)], toks, title),
                        caption=title, file=f"{file_stem}_{i}.png")
            for i, (toks, title) in enumerate(zip(tokens, titles))]


def figure_png(fig) -> bytes:
    """The figure as PNG bytes (for embedding in HTML); the figure is closed."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)
    plt.close(fig)
    return buf.getvalue()


# -- panels: what a task's ``dashboard(batch)`` returns ------------------------------------------------
def image_panel(key: str, fig, caption: str = "", file: Optional[str] = None) -> dict:
    """An image logged under ``key``; ``file``: also saved to ``attention/`` when training ends."""
    return {"kind": "image", "key": key, "image": figure_to_array(fig), "caption": caption, "file": file}


def html_panel(key: str, html: str) -> dict:
    return {"kind": "html", "key": key, "html": html}


def table_panel(key: str, columns: Sequence[str], rows: Sequence[Sequence]) -> dict:
    return {"kind": "table", "key": key, "columns": list(columns), "rows": [list(r) for r in rows]}


# -- images (captioning) ---------------------------------------------------------------------------
CAPTION_SIZE = (8.0, 8.6)      # 800 × 860 pixels: a 4 × 4 grid of panels and a title line
CAPTION_GRID = (4, 4)          # rows, columns: the image and up to 15 words
CAPTION_OVERLAY = 0.6          # opacity of the heat map over the image


def _as_tensor(x) -> torch.Tensor:
    return torch.as_tensor(x).detach().cpu()


def alpha_grid(alpha, boxes) -> torch.Tensor:
    """α (T, L) as (T, h, w) maps on the row-major grid of ``boxes`` (L, 4) [top, left, bottom,
    right): w boxes share the first box's top."""
    alpha, b = _as_tensor(alpha), _as_tensor(boxes).double()
    L = alpha.shape[1]
    w = int((b[:, 0] == b[0, 0]).sum())
    cells = b.reshape(L // w, w, 4)
    assert bool((cells[..., 0] == cells[:, :1, 0]).all() and (cells[..., 1] == cells[:1, :, 1]).all()), \
        "boxes must be a row-major grid of regions (the encoder's region_boxes)"
    return alpha.float().reshape(alpha.shape[0], L // w, w)


def attention_overlay(alpha, boxes, height: int, width: int) -> torch.Tensor:
    """(T, height, width) heat maps in [0, 1] (NaN outside the boxes): each word's α upsampled
    bilinearly over the grid's pixels (as the Show-Attend-Tell tutorials), stretched from the
    uniform share 1/L (0) to max(largest α, 2/L) (1), so near-uniform α stays dark."""
    grid = alpha_grid(alpha, boxes)
    b = _as_tensor(boxes).double()
    top, left = int(round(float(b[:, 0].min()))), int(round(float(b[:, 1].min())))
    bottom, right = int(round(float(b[:, 2].max()))), int(round(float(b[:, 3].max())))
    out = torch.full((grid.shape[0], height, width), float("nan"))
    y0, x0, y1, x1 = max(top, 0), max(left, 0), min(bottom, height), min(right, width)
    if y1 > y0 and x1 > x0 and grid.shape[0]:  # boxes past the image's edge: cropped after
        up = torch.nn.functional.interpolate(grid[:, None], size=(bottom - top, right - left),
                                             mode="bilinear", align_corners=False)[:, 0]
        share = 1.0 / (grid.shape[1] * grid.shape[2])
        above = (grid.flatten(1).amax(1).clamp_min(2 * share) - share)[:, None, None]
        heat = ((up - share) / above).clamp(0, 1)
        out[:, y0:y1, x0:x1] = heat[:, y0 - top: y1 - top, x0 - left: x1 - left]
    return out


def caption_figure(image, words: Sequence[str], alpha, boxes, title: str = "",
                   figsize=CAPTION_SIZE, reference: Optional[str] = None):
    """A caption's attention on its image (Xu et al. 2015, Fig. 2–3): the image, then per word
    (up to 15) its α (``alpha`` (T, L) over ``boxes``) as a heat map over the image
    (:func:`attention_overlay`); ``reference``, where given, is a second title line.
    ``image`` (3 or 1, H, W) floats in [0, 1]."""
    img, a = _as_tensor(image), _as_tensor(alpha)
    H, W = img.shape[1:]
    rows, cols = CAPTION_GRID
    shown = min(len(words), rows * cols - 1)
    heat = attention_overlay(a[:shown], boxes, H, W).numpy()
    pixels = img.float().clamp(0, 1).expand(3, H, W).permute(1, 2, 0).numpy()
    more = len(words) - shown
    fig = plt.figure(figsize=figsize, dpi=DPI)
    top_room = (0.6 if reference is None else 0.85) / figsize[1]  # the title lines, in figure fractions
    cw, ch = 1.0 / cols, (1.0 - top_room) / rows
    hot = matplotlib.colormaps["inferno"].with_extremes(bad=(0, 0, 0, 0))  # NaN: no region there
    for k in range(rows * cols):  # panels, not pixels: at most 16
        r, c = divmod(k, cols)
        ax = fig.add_axes((c * cw + 0.01, 1.0 - top_room - (r + 1) * ch + 0.01, cw - 0.02, ch - 0.05))
        ax.set_axis_off()
        if k > shown:
            continue
        ax.imshow(pixels, interpolation="bilinear")
        if k == 0:
            ax.set_title("image", fontsize=9)
            continue
        word = str(words[k - 1])
        ax.imshow(np.ma.masked_invalid(heat[k - 1]), cmap=hot, vmin=0.0, vmax=1.0,
                  alpha=CAPTION_OVERLAY, interpolation="nearest")
        ax.set_title(word if len(word) <= 18 else word[:17] + "…", fontsize=9)
        ax.text(0.5, -0.02, f"max α {float(a[k - 1].max()):.3g} (uniform {1 / a.shape[1]:.3g})",
                transform=ax.transAxes, ha="center", va="top", fontsize=7)
    head = title + (f" … {more} more" if more else "")
    if reference is not None:
        head += f"\nreference: {reference if len(reference) <= 110 else reference[:109] + '…'}"
    if head:
        fig.suptitle(head, fontsize=10, y=1.0 - 0.15 / figsize[1], va="top")
    return fig
