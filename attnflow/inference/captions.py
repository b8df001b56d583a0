"""Captioning runs applied: the run's task rebuilt with its vocabulary, images (or region
features) read as in training and captioned in batches, with each word's α over the region grid
and the picture to draw it on."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Iterator, List, Optional, Sequence

import numpy as np
import torch

from attnflow.config.registry import ConfigError
from attnflow.data.captions import load_image
from attnflow.data.errors import DataError
from attnflow.inference.runs import InferenceError, rebuild
from attnflow.io.checkpoints import CheckpointError, Run, run_artifacts
from attnflow.viz.figures import decoder_alpha_label

PAD, BOS, EOS = 0, 1, 2  # the captioning vocabularies' fixed ids (attnflow.data.shapes.Vocab)
SIBLING_IMAGES = (".png", ".jpg", ".jpeg")
DRAW_SIZE = 224  # pixels of a features run's sibling image in the overlay


def load_captioner(run: Run, device: str = "cpu"):
    """(task, artifacts): the run's captioning task around its model, weights loaded, eval mode."""
    art = run_artifacts(run)
    missing = [k for k in ("itos", "input", "max_decode_len") if art.get(k) is None]
    if missing:
        raise CheckpointError(f"the run at {run.run_dir} has no captioning vocabulary: "
                              f"{run.run_dir / 'vocab.json'} and the checkpoint's artifacts lack "
                              f"{', '.join(repr(k) for k in missing)}")
    itos = [str(w) for w in art["itos"]]
    features = art["input"] == "features"
    sizes = {"tgt_vocab": len(itos), "pad_id": PAD, "in_channels": None if features else 3,
             "feature_dim": int(art["feature_dim"]) if features else None}
    task_sizes = {"pad_id": PAD, "bos_id": BOS, "eos_id": EOS, "max_decode_len": int(art["max_decode_len"]),
                  "itos": itos, "references": None}
    return rebuild(run, sizes, f" (a vocabulary of {len(itos)} words, " + (
        f"features of {art['feature_dim']})" if features else f"{art['image_size']}-pixel images)"),
        task_sizes, device), art


def read_input(path: str, art: dict, model) -> torch.Tensor:
    """One input as the model reads it: (3, S, S) pixels, or (L, D) features from a ``.npy``."""
    if art["input"] != "features":
        return load_image(path, int(art["image_size"]))  # a DataError names the file
    p = Path(path)
    try:
        x = np.load(p, allow_pickle=False)
    except (OSError, ValueError, EOFError) as err:
        raise InferenceError(f"cannot read features {p}: {' '.join(str(err).split())} (a "
                             f".npy array (L, D) per input)") from None
    D = int(art["feature_dim"])
    if x.ndim != 2 or x.shape[1] != D or x.shape[0] < 1:
        raise InferenceError(f"features {p} have shape {x.shape}; the run reads (L, {D}) region "
                             f"features (its data.features had D = {D})")
    feats = torch.from_numpy(x.astype(np.float32))
    try:
        model.grid(feats[None])
    except ConfigError as err:
        raise InferenceError(f"features {p}: {err}") from None
    return feats


def picture(path: str, x: torch.Tensor, art: dict, model) -> torch.Tensor:
    """The pixels to draw the attention on: the input itself, or for features the image beside
    the ``.npy`` file (same stem), else a grey canvas of 16 pixels per grid cell (as the task's
    dashboard draws region features)."""
    if art["input"] != "features":
        return x
    sibling = next((q for q in map(Path(path).with_suffix, SIBLING_IMAGES) if q.is_file()), None)
    if sibling:
        with contextlib.suppress(DataError):  # an unreadable one: the grey canvas
            return load_image(sibling, DRAW_SIZE)
    h, w = model.grid(x[None])
    return torch.full((3, 16 * h, 16 * w), 0.5)


def caption_images(task, art: dict, paths: Sequence[str], batch_size: int,
                   beam: Optional[int] = None) -> Iterator[List[dict]]:
    """Per batch of ``paths``, per image: ``image`` (its path), ``input`` (as the model reads
    it), ``words``, ``alpha`` (T, L) averaged over heads, ``grid`` (h, w) and ``label`` (what
    α is: :func:`attnflow.viz.figures.decoder_alpha_label`). A batch is one call of
    ``task.caption`` when its inputs share a shape (always for pixels), else one per input
    (features with different L)."""
    for first in range(0, len(paths), batch_size):
        chunk = paths[first:first + batch_size]
        xs = [read_input(p, art, task.model) for p in chunk]
        same = len({tuple(x.shape) for x in xs}) == 1
        each = [task.caption(torch.stack(b).to(task.device), beam, need_weights=True, keep_heads=True)
                for b in ([xs] if same else [[x] for x in xs])]
        words, alphas = [w for ws, _ in each for w in ws], [a for _, als in each for a in als]
        yield [{"image": p, "input": x, "words": w, "alpha": a.mean(1), "grid": task.model.grid(x[None]),
                "label": decoder_alpha_label(task.model, a.shape[1])}
               for p, x, w, a in zip(chunk, xs, words, alphas)]
