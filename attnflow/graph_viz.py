"""The graph-attention picture, after Veličković et al. 2018, Fig. 2: node
vectors projected to 2-D, coloured by class, with each edge drawn with opacity and width ∝ its
attention weight (mean over heads). The task draws the output layer's vectors with the output
layer's α (the paper's figure shows the first hidden layer with its 8 heads summed). The projection is PCA (``torch.pca_lowrank``; scikit-learn's t-SNE is
not a dependency)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from matplotlib.collections import LineCollection  # noqa: E402


def project_2d(vectors: torch.Tensor) -> torch.Tensor:
    """(N, D) -> (N, 2): the first two principal components."""
    x = vectors.float() - vectors.float().mean(0, keepdim=True)
    if x.shape[1] <= 2:
        return torch.nn.functional.pad(x, (0, 2 - x.shape[1]))
    _, _, v = torch.pca_lowrank(x, q=2, center=False)
    return x @ v[:, :2]


def embedding_figure(vectors: torch.Tensor, labels: torch.Tensor, edge_index: torch.Tensor,
                     weights: torch.Tensor, title: str = "output-layer node vectors (PCA); "
                     "edges by attention"):
    """A figure: points coloured by ``labels``, edges (2, E) drawn by ``weights`` (E,) in [0, 1]."""
    xy = project_2d(vectors).numpy()
    src, dst = edge_index.numpy()
    keep = src != dst  # self-loops draw nothing
    w = weights.numpy()[keep]
    segments = np.stack([xy[src[keep]], xy[dst[keep]]], axis=1)
    fig, ax = plt.subplots(figsize=(7, 7))
    ax.add_collection(LineCollection(segments, colors=np.column_stack([np.zeros((len(w), 3)), 0.6 * w]),
                                     linewidths=0.2 + 1.5 * w))
    ax.scatter(xy[:, 0], xy[:, 1], c=labels.numpy(), cmap="tab10", s=6, zorder=2)
    ax.set_title(title, fontsize=9)
    ax.set_xticks([])
    ax.set_yticks([])
    fig.tight_layout()
    return fig


def log_figure(fig, path: Path, trainer, tag: str) -> Path:
    """Save ``fig`` to ``path`` and log it to the trainer's TensorBoard / W&B loggers."""
    from pytorch_lightning.loggers import TensorBoardLogger, WandbLogger

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    fig.canvas.draw()
    img = np.asarray(fig.canvas.buffer_rgba())[..., :3].copy()
    plt.close(fig)
    for lg in trainer.loggers:
        if isinstance(lg, WandbLogger):
            lg.log_image(tag, [img], step=trainer.global_step)
        elif isinstance(lg, TensorBoardLogger):
            lg.experiment.add_image(tag, img, trainer.global_step, dataformats="HWC")
    return path
