"""attnflow-predict for captioning runs: caption images and draw where each word looked.

Inputs are read as in training (images resized; a features run: one ``.npy`` (L, D) each), all
before anything is written. ``--attention OUT.png`` draws each word's α over the region grid (Xu
et al. 2015, Fig. 2–3) to OUT.png, or OUT-0.png, OUT-1.png, …; a features run draws on the image
of the same stem beside the ``.npy`` file, else on a grey canvas.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Dict, List

import matplotlib.pyplot as plt
import numpy as np

from attnflow.cli.predict_io import read_texts, write_attention
from attnflow.inference.captions import caption_images, load_captioner, picture, read_input
from attnflow.inference.runs import InferenceError
from attnflow.io.checkpoints import Run
from attnflow.io.text import atomic_path, check_new_outputs, check_png, no_inputs, text_array
from attnflow.viz.figures import DPI, caption_figure


def attention_names(out: str, n: int) -> List[Path]:
    """``--attention OUT.png``: OUT.png for one input, OUT-0.png … OUT-(n-1).png for several."""
    path = Path(out)
    return [path] if n == 1 else [path.with_name(f"{path.stem}-{i}{path.suffix}") for i in range(n)]


def _line(path: str, words: List[str], as_json: bool) -> str:
    caption = " ".join(words)
    return (json.dumps({"image": path, "caption": caption, "words": words}, ensure_ascii=False)
            if as_json else f"{path}\t{caption}")


def _draw(name: Path, r: dict, art: dict, model) -> None:
    """``--attention``: each word's α over the picture of the input, to ``name``."""
    pixels = picture(r["image"], r["input"], art, model)
    boxes = model.region_boxes(r["input"][None], pixel_size=tuple(pixels.shape[-2:]))
    fig = caption_figure(pixels, r["words"], r["alpha"], boxes,
                         title=f"{r['label']}: {' '.join(r['words']) or '(empty caption)'}")
    with atomic_path(name) as tmp:
        fig.savefig(tmp, format="png", dpi=DPI)
    plt.close(fig)
    print(f"attnflow-predict: attention of {r['image']} drawn to {name}", file=sys.stderr)


def predict_captions(args, run: Run, out) -> int:
    """attnflow-predict on a captioning run (see the module docstring)."""
    if args.attention:
        check_png(args.attention)
    task, art = load_captioner(run, args.device)
    paths, _ = read_texts(args, args.texts)
    paths = [p.strip() for p in paths if p.strip()]  # blank lines of a list are no images
    if not paths:
        raise InferenceError(no_inputs("images", "--file", args.file, "image paths"))
    for path in paths:  # every input readable before any output
        read_input(path, art, task.model)
    names = attention_names(args.attention, len(paths)) if args.attention else []
    check_new_outputs(*(("--attention", name) for name in names),  # OUT-1.png, … too
                      ("-o", args.output), ("--save-attention", args.save_attention))
    arrays: Dict[str, np.ndarray] = {}
    first = 0
    for chunk in caption_images(task, art, paths, args.batch_size, args.beam):
        print("\n".join(_line(r["image"], r["words"], args.json) for r in chunk), file=out, flush=True)
        for i, r in enumerate(chunk, first):
            w, (h, wd) = r["words"], r["grid"]
            if args.save_attention:
                arrays.update({f"{i}/words": text_array(w).reshape(len(w)),
                               f"{i}/alpha": r["alpha"].float().numpy().reshape(len(w), h, wd),
                               f"{i}/image": np.asarray(r["image"], dtype=str)})
            if names:
                _draw(names[i], r, art, task.model)
        first += len(chunk)
    if args.save_attention:
        write_attention(args.save_attention, arrays, "captioning", len(paths), "images")
    return 0
