"""Attention heat maps: α as an image with tokens on the axes (matplotlib, no screen needed)."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402


def attention_figure(weights: torch.Tensor, source: Sequence[str], output: Sequence[str],
                     title: str = ""):
    """A figure of α (rows: output tokens, columns: source tokens), darker = more weight."""
    w = weights.detach().float().cpu().numpy()
    fig, ax = plt.subplots(figsize=(0.35 * len(source) + 2, 0.35 * len(output) + 1.5))
    im = ax.imshow(w, cmap="Greys", vmin=0.0, vmax=1.0, aspect="auto")
    ax.set_xticks(range(len(source)), labels=list(source), rotation=90)
    ax.set_yticks(range(len(output)), labels=list(output))
    ax.set_xlabel("source")
    ax.set_ylabel("output")
    if title:
        ax.set_title(title, fontsize=9)
    fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    fig.tight_layout()
    return fig


def save_attention_png(path: Path, weights: torch.Tensor, source: Sequence[str],
                       output: Sequence[str], title: str = "") -> Path:
    fig = attention_figure(weights, source, output, title)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
