"""The graph-attention picture after Veličković et al. 2018, Fig. 2: node vectors projected to 2-D
(PCA), coloured by class, each edge's opacity and width ∝ its α (mean over heads); and the
per-node neighbourhoods of the dashboards."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional, Sequence, Tuple

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from matplotlib.collections import LineCollection  # noqa: E402

from attnflow.viz.figures import image_panel  # noqa: E402
from attnflow.viz.panels import log_panels  # noqa: E402


def project_2d(vectors: torch.Tensor) -> torch.Tensor:
    """(N, D) -> (N, 2): the first two principal components."""
    x = vectors.float() - vectors.float().mean(0, keepdim=True)
    if x.shape[1] <= 2:
        return torch.nn.functional.pad(x, (0, 2 - x.shape[1]))
    _, _, v = torch.pca_lowrank(x, q=2, center=False)
    return x @ v[:, :2]


def embedding_figure(vectors: torch.Tensor, labels: torch.Tensor, edge_index: torch.Tensor,
                     weights: torch.Tensor, title: str = "output-layer node vectors (PCA); "
                     "edges by attention", class_names: Optional[Sequence[str]] = None):
    """A figure: points coloured by ``labels`` with a class legend (``class_names``, default
    'class <i>') beside the axes, where it covers no point; edges (2, E) drawn by ``weights``
    (E,) in [0, 1]. Always 700 × 700 pixels: the axes make room for the legend."""
    xy = project_2d(vectors).numpy()
    src, dst = edge_index.numpy()
    keep = src != dst  # self-loops draw nothing
    w = weights.numpy()[keep]
    segments = np.stack([xy[src[keep]], xy[dst[keep]]], axis=1)
    fig, ax = plt.subplots(figsize=(7, 7), dpi=100, layout="constrained")
    ax.add_collection(LineCollection(segments, colors=np.column_stack([np.zeros((len(w), 3)), 0.6 * w]),
                                     linewidths=0.2 + 1.5 * w))
    classes = int(labels.max()) + 1 if labels.numel() else 0
    points = ax.scatter(xy[:, 0], xy[:, 1], c=labels.numpy(), cmap="tab10", s=6, zorder=2,
                        vmin=0, vmax=max(classes - 1, 9))
    present = sorted(set(labels.tolist()))
    handles = [plt.Line2D([], [], marker="o", linestyle="", markersize=5,
                          color=points.cmap(points.norm(c))) for c in present]
    names = [class_names[c] if class_names and c < len(class_names) else f"class {c}" for c in present]
    ax.legend(handles, names, title="class", fontsize=7, title_fontsize=8, loc="upper left",
              bbox_to_anchor=(1.02, 1), borderaxespad=0, ncol=1 + (len(present) - 1) // 30)
    ax.set_title(title, fontsize=9)
    ax.set_xticks([])
    ax.set_yticks([])
    return fig


def log_figure(fig, path: Path, trainer, tag: str, caption: str = "", when: str = "") -> Path:
    """Save ``fig`` to ``path`` and log it to the trainer's loggers under ``tag``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    log_panels(trainer.loggers, [image_panel(tag, fig, caption)], trainer.global_step, when)
    return path


def neighbourhoods(weights: Sequence[Tuple[torch.Tensor, torch.Tensor]], nodes: torch.Tensor,
                   max_neighbours: Optional[int] = 24) -> List[Tuple[torch.Tensor, List[torch.Tensor]]]:
    """Per node t: (its first-layer neighbours j, [α_tj per layer: (K, heads)]) from a GAT's
    [(edge_index, α (E, J))]; at most the ``max_neighbours`` heaviest (None: all), in node order."""
    size = max(int(ei.max()) for ei, _ in weights) + 1 if weights[0][0].numel() else 1
    out = []
    for t in nodes.tolist():  # a few nodes, for pictures
        edge_index = weights[0][0]
        nbrs = edge_index[0, edge_index[1] == t].unique()
        alphas = []
        for ei, alpha in weights:  # each layer's α of the edges j -> t, in nbrs' order
            into = ei[1] == t
            table = torch.zeros(size, alpha.shape[-1])
            table[ei[0, into]] = alpha[into].float().cpu()
            alphas.append(table[nbrs])
        out.append(heaviest(nbrs, alphas, max_neighbours))
    return out


def heaviest(nbrs: torch.Tensor, alphas: List[torch.Tensor], max_neighbours: Optional[int] = 24):
    """(nbrs, alphas) of one node cut to the ``max_neighbours`` of the largest mean α over
    layers and heads, in node order (None: all)."""
    if max_neighbours is None or len(nbrs) <= max_neighbours:
        return nbrs, alphas
    mean = torch.stack([a.mean(-1) for a in alphas]).mean(0)
    keep = mean.topk(max_neighbours).indices.sort().values
    return nbrs[keep], [a[keep] for a in alphas]
