"""attnflow-predict for captioning runs: caption images and draw where each word looked.

Inputs are read as in training (images resized; a features run: one ``.npy`` (L, D) each), all
before anything is written. ``--attention OUT.png`` draws each word's α over the region grid (Xu
et al. 2015, Fig. 2–3) to OUT.png, or OUT-0.png, OUT-1.png, …; a features run draws on the image
of the same stem beside the ``.npy`` file, else on a grey canvas.
"""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import matplotlib.pyplot as plt
import numpy as np
import torch

from attnflow.cli.predict_io import PredictError, read_texts, write_attention
from attnflow.data.captions import load_image
from attnflow.data.errors import DataError
from attnflow.config.registry import MODELS, TASKS, ConfigError
from attnflow.io.checkpoints import CheckpointError, Run, load_weights, run_artifacts
from attnflow.io.text import (atomic_path, check_new_outputs, check_png, no_inputs,
                              text_array)
from attnflow.viz.figures import DPI, caption_figure, decoder_alpha_label

PAD, BOS, EOS = 0, 1, 2  # the captioning vocabularies' fixed ids (attnflow.data.shapes.Vocab)
SIBLING_IMAGES = (".png", ".jpg", ".jpeg")
DRAW_SIZE = 224  # pixels of a features run's sibling image in the overlay


def load_captioner(run: Run, device: str = "cpu"):
    """(task, artifacts): the run's captioning task around its model, weights loaded, eval mode."""
    cfg, art = run.config, run_artifacts(run)
    missing = [k for k in ("itos", "input", "max_decode_len") if art.get(k) is None]
    if missing:
        raise CheckpointError(f"the run at {run.run_dir} has no captioning vocabulary: "
                              f"{run.run_dir / 'vocab.json'} and the checkpoint's artifacts lack "
                              f"{', '.join(repr(k) for k in missing)}")
    itos = [str(w) for w in art["itos"]]
    features = art["input"] == "features"
    model = MODELS.build(cfg["model"], path="model", tgt_vocab=len(itos), pad_id=PAD,
                         in_channels=None if features else 3,
                         feature_dim=int(art["feature_dim"]) if features else None)
    task = TASKS.build(cfg["task"], model, path="task", pad_id=PAD, bos_id=BOS, eos_id=EOS,
                       max_decode_len=int(art["max_decode_len"]), itos=itos, references=None)
    load_weights(model, run.ckpt["state_dict"], "model.",
                 f"model '{cfg['model'].get('name')}' (a vocabulary of {len(itos)} words, "
                 + (f"features of {art['feature_dim']})" if features else
                    f"{art['image_size']}-pixel images)"))
    return task.eval().to(device), art


def read_input(path: str, art: dict, model) -> torch.Tensor:
    """One input as the model reads it: (3, S, S) pixels, or (L, D) features from a ``.npy``."""
    if art["input"] != "features":
        return load_image(path, int(art["image_size"]))  # a DataError names the file
    p = Path(path)
    try:
        x = np.load(p, allow_pickle=False)
    except (OSError, ValueError, EOFError) as err:
        raise PredictError(f"cannot read features {p}: {' '.join(str(err).split())} (a "
                                f".npy array (L, D) per input)") from None
    D = int(art["feature_dim"])
    if x.ndim != 2 or x.shape[1] != D or x.shape[0] < 1:
        raise PredictError(f"features {p} have shape {x.shape}; the run reads (L, {D}) region "
                           f"features (its data.features had D = {D})")
    feats = torch.from_numpy(x.astype(np.float32))
    try:
        model.grid(feats[None])
    except ConfigError as err:
        raise PredictError(f"features {p}: {err}") from None
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


def attention_names(out: str, n: int) -> List[Path]:
    """``--attention OUT.png``: OUT.png for one input, OUT-0.png … OUT-(n-1).png for several."""
    path = Path(out)
    return [path] if n == 1 else [path.with_name(f"{path.stem}-{i}{path.suffix}") for i in range(n)]


def _caption_batch(task, xs: Sequence[torch.Tensor], beam: Optional[int]):
    """Words and α (T_i, J, L) per input: one call of ``task.caption`` when the inputs share a
    shape (always for pixels), else one per input (features with different L)."""
    if len({tuple(x.shape) for x in xs}) == 1:
        return task.caption(torch.stack(list(xs)).to(task.device), beam, need_weights=True,
                            keep_heads=True)
    each = [task.caption(x[None].to(task.device), beam, need_weights=True, keep_heads=True)
            for x in xs]
    return [w for ws, _ in each for w in ws], [a for _, als in each for a in als]


def _line(path: str, words: List[str], as_json: bool) -> str:
    caption = " ".join(words)
    return (json.dumps({"image": path, "caption": caption, "words": words}, ensure_ascii=False)
            if as_json else f"{path}\t{caption}")


def predict_captions(args, run: Run, out) -> int:
    """attnflow-predict on a captioning run (see the module docstring)."""
    if args.attention:
        check_png(args.attention)
    task, art = load_captioner(run, args.device)
    paths, _ = read_texts(args, args.texts)
    paths = [p.strip() for p in paths if p.strip()]  # blank lines of a list are no images
    if not paths:
        raise PredictError(no_inputs("images", "--file", args.file, "image paths"))
    for path in paths:  # every input readable before any output
        read_input(path, art, task.model)
    names = attention_names(args.attention, len(paths)) if args.attention else []
    check_new_outputs(*(("--attention", name) for name in names),  # OUT-1.png, … too
                      ("-o", args.output), ("--save-attention", args.save_attention))
    arrays: Dict[str, np.ndarray] = {}
    for first, chunk in ((k, paths[k:k + args.batch_size]) for k in range(0, len(paths), args.batch_size)):
        xs = [read_input(p, art, task.model) for p in chunk]
        words, alphas = _caption_batch(task, xs, args.beam)
        print("\n".join(_line(p, w, args.json) for p, w in zip(chunk, words)), file=out, flush=True)
        for i, path, x, w, a in zip(range(first, len(paths)), chunk, xs, words, alphas):
            what, a, (h, wd) = decoder_alpha_label(task.model, a.shape[1]), a.mean(1), task.model.grid(x[None])
            if args.save_attention:
                arrays.update({f"{i}/words": text_array(w).reshape(len(w)),
                               f"{i}/alpha": a.float().numpy().reshape(len(w), h, wd),
                               f"{i}/image": np.asarray(path, dtype=str)})
            if names:
                pixels = picture(path, x, art, task.model)
                boxes = task.model.region_boxes(x[None], pixel_size=tuple(pixels.shape[-2:]))
                fig = caption_figure(pixels, w, a, boxes, title=f"{what}: {' '.join(w) or '(empty caption)'}")
                with atomic_path(names[i]) as tmp:
                    fig.savefig(tmp, format="png", dpi=DPI)
                plt.close(fig)
                print(f"attnflow-predict: attention of {path} drawn to {names[i]}", file=sys.stderr)
    if args.save_attention:
        write_attention(args.save_attention, arrays, "captioning", len(paths), "images")
    return 0

