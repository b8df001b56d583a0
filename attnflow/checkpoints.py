"""Finding and reading the checkpoint of a run, for the command-line tools (translate, predict).

A run directory (``outputs/<date>/<time>/``) holds ``metrics.json`` naming the best checkpoint and
``checkpoints/*.ckpt``. The path in ``metrics.json`` is absolute, so a run directory that was moved
or copied is looked up by the checkpoint's file name under its own ``checkpoints/``.
Checkpoints are read with ``torch.load(weights_only=True)``: attnflow stores only tensors and plain
containers in them, so a file that needs unpickling of arbitrary objects is refused.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, Tuple

import torch


class CheckpointError(ValueError):
    """A run directory or checkpoint that cannot be used; the message says what was expected."""


def find_checkpoint(path: Path | str) -> Tuple[Path, Path]:
    """(checkpoint, run directory) for a run directory or a checkpoint file: the best checkpoint
    of ``metrics.json`` if there is one, else ``last.ckpt``, else the first ``*.ckpt``."""
    path = Path(path)
    if path.is_file():
        run_dir = path.parent.parent if path.parent.name == "checkpoints" else path.parent
        return path, run_dir
    if not path.is_dir():
        raise CheckpointError(f"no such run directory or checkpoint: {path}")
    ckpts = path / "checkpoints"
    metrics = path / "metrics.json"
    if metrics.is_file():
        best = json.loads(metrics.read_text()).get("best_checkpoint")
        if best:
            for cand in (Path(best), ckpts / Path(best).name):  # the second: a moved run directory
                if cand.is_file():
                    return cand, path
    for cand in [ckpts / "last.ckpt", *sorted(ckpts.glob("*.ckpt"))]:
        if cand.is_file():
            return cand, path
    raise CheckpointError(f"{path} is a directory without checkpoints (expected {ckpts}/*.ckpt "
                          f"from attnflow-train)")


def read_checkpoint(path: Path, device: str = "cpu") -> Dict[str, Any]:
    """The checkpoint's dictionary, read without unpickling arbitrary objects."""
    try:
        ckpt = torch.load(path, map_location=device, weights_only=True)
    except Exception as err:  # noqa: BLE001  (any unreadable or unsafe file)
        raise CheckpointError(f"cannot read checkpoint {path}: {type(err).__name__}: "
                              f"{str(err).splitlines()[0] if str(err) else ''}") from None
    if not isinstance(ckpt, dict) or "state_dict" not in ckpt:
        raise CheckpointError(f"{path} is not an attnflow/Lightning checkpoint (no state_dict)")
    return ckpt


_ATTENTION_FIELDS = {"heads": "heads", "scorer": "scorer", "attention_dropout": "dropout"}


def _upgrade_model(node: Any) -> Any:
    """Model configs of older runs: the Transformer's flat ``heads``/``scorer``/
    ``attention_dropout`` (now its ``attention`` child) and seq2seq's unused ``positional``."""
    if isinstance(node, list):
        return [_upgrade_model(v) for v in node]
    if not isinstance(node, dict):
        return node
    node = {k: _upgrade_model(v) for k, v in node.items()}
    if node.get("name") in ("transformer", "transformer_encoder", "transformer_decoder") \
            and "attention" not in node:
        attention = {"name": "multihead"}
        attention.update({new: node.pop(old) for old, new in _ATTENTION_FIELDS.items() if old in node})
        node["attention"] = attention
    if node.get("name") == "seq2seq":
        node.pop("positional", None)
    return node


# the fields of the task's ``optim`` child config, which older runs had at the task's top level
_FLAT_OPTIM_FIELDS = ("optimizer", "lr", "weight_decay", "scheduler", "warmup_steps")


def upgrade_task_config(task_cfg: Dict[str, Any]) -> Dict[str, Any]:
    """A task config with the flat optimiser fields of older runs (``lr``, ``optimizer``, ...)
    moved under ``optim``."""
    out = dict(task_cfg)
    flat = {k: out.pop(k) for k in _FLAT_OPTIM_FIELDS if k in out}
    if flat:
        out["optim"] = {**flat, **dict(out.get("optim") or {})}
    return out


def upgrade_config(cfg: Dict[str, Any]) -> Dict[str, Any]:
    """A run config saved by an older attnflow, in today's field layout (model and task)."""
    cfg = dict(cfg)
    if isinstance(cfg.get("model"), dict):
        cfg["model"] = _upgrade_model(cfg["model"])
    if isinstance(cfg.get("task"), dict):
        cfg["task"] = upgrade_task_config(cfg["task"])
    return cfg
