"""One training run, from a resolved config to files in the run directory.

This module owns the run directory: ``config.yaml`` (the resolved config), ``checkpoints/``
(Lightning's ModelCheckpoint: best and last), ``attention/`` (heat maps), ``metrics.json`` (final
validation and test metrics by name), and the logger's files (``csv/``, ``tensorboard/``,
``wandb/``). Order of work:

1. validate every block config against the registries and the trainer/callback fields — before
   any data is made or loaded, so a typo fails in a second with a message, not a traceback;
2. build the data module, the model (a tree of blocks) and the task from the registries;
3. ``Trainer.fit``, then validation and test of the best checkpoint;
4. write ``metrics.json`` (atomically; a failed run writes none and overwrites nothing) and always
   finish the W&B run, with a failure exit code if training failed.
"""

from __future__ import annotations

import inspect
import json
import os
import time
from pathlib import Path
from typing import Any, Dict, List

import pytorch_lightning as pl
from omegaconf import DictConfig, OmegaConf
from pytorch_lightning.callbacks import EarlyStopping, LearningRateMonitor, ModelCheckpoint
from pytorch_lightning.callbacks import RichProgressBar, TQDMProgressBar
from pytorch_lightning.loggers import WandbLogger

import attnflow  # noqa: F401  (registers the built-in blocks)
from attnflow.callbacks import AttentionMaps
from attnflow.registry import (AGGREGATORS, ATTENTIONS, DATA, LOGGERS, MODELS, NORMALIZERS,
                               POSITIONALS, SCORERS, TASKS, ConfigError, _suggest)

# Top-level config groups validated by a registry. The shared choices (scorer, normalizer,
# aggregator, attention) are interpolated into models; validating them here names the path the
# user typed (``scorer.name=...``).
BLOCK_GROUPS = [("scorer", SCORERS), ("normalizer", NORMALIZERS), ("aggregator", AGGREGATORS),
                ("attention", ATTENTIONS), ("positional", POSITIONALS), ("data", DATA),
                ("model", MODELS), ("task", TASKS), ("logger", LOGGERS)]

CALLBACK_FIELDS = {
    "checkpoint": {"monitor", "mode", "save_top_k", "save_last"},
    "early_stopping": {"monitor", "mode", "patience", "min_delta"},
    "attention_maps": {"examples", "every_n_epochs"},
    "progress_bar": None,  # 'rich', 'tqdm' or 'none'
    "lr_monitor": None,  # bool
}


def _trainer_fields() -> List[str]:
    return [p for p in inspect.signature(pl.Trainer.__init__).parameters if p != "self"]


def validate_config(cfg: Dict[str, Any]) -> None:
    """Raise :class:`ConfigError` for any unknown block name or bad field in ``cfg``."""
    for group, registry in BLOCK_GROUPS:
        if group in cfg and cfg[group] is not None:
            registry.validate(cfg[group], group)
        elif group in ("data", "model", "task"):
            raise ConfigError(f"the config has no '{group}': choose one with {group}=NAME")
    _check_positional_is_used(cfg)
    allowed = _trainer_fields()
    for key in cfg.get("trainer") or {}:
        if key not in allowed or key in ("logger", "callbacks", "default_root_dir", "enable_progress_bar"):
            raise ConfigError(
                f"trainer has no field '{key}' (at 'trainer.{key}'); fields are the arguments of "
                f"lightning's Trainer except logger, callbacks, default_root_dir and enable_progress_bar (set by attnflow; use callbacks.progress_bar).{_suggest(key, allowed)}")
    for key, value in (cfg.get("callbacks") or {}).items():
        if key not in CALLBACK_FIELDS:
            raise ConfigError(f"callbacks has no entry '{key}' (at 'callbacks.{key}'); entries: "
                              f"{', '.join(CALLBACK_FIELDS)}.{_suggest(key, CALLBACK_FIELDS)}")
        fields = CALLBACK_FIELDS[key]
        if fields and isinstance(value, dict):
            for f in value:
                if f not in fields:
                    raise ConfigError(f"callbacks.{key} has no field '{f}' (at 'callbacks.{key}.{f}'); "
                                      f"fields: {', '.join(sorted(fields))}.{_suggest(f, fields)}")
    bar = (cfg.get("callbacks") or {}).get("progress_bar", "rich")
    if bar not in ("rich", "tqdm", "none", None):
        raise ConfigError(f"callbacks.progress_bar must be 'rich', 'tqdm' or 'none', got {bar!r}")


def _mentions(tree: Any, key: str) -> bool:
    if isinstance(tree, dict):
        return key in tree or any(_mentions(v, key) for v in tree.values())
    if isinstance(tree, list):
        return any(_mentions(v, key) for v in tree)
    return False


def _check_positional_is_used(cfg: Dict[str, Any]) -> None:
    """A non-default ``positional=`` on a model that has no positional encoding is an error."""
    pos, model = cfg.get("positional"), cfg.get("model")
    if not isinstance(pos, dict) or not isinstance(model, dict) or _mentions(model, "positional"):
        return
    if pos.get("name", "sinusoidal") != "sinusoidal":
        raise ConfigError(
            f"positional={pos['name']} (at 'positional') does nothing for model '{model.get('name')}': "
            f"none of its blocks takes a positional encoding (recurrent encoders and decoders see "
            f"word order through the recurrence; relative positions change self-attention, which "
            f"it does not have). Use model=transformer, or an encoder that takes one "
            f"(model.encoder.name=transformer_encoder)")


def build_callbacks(cfg: Dict[str, Any], run_dir: Path) -> List[pl.Callback]:
    out: List[pl.Callback] = []
    ck = cfg.get("checkpoint")
    if ck:
        out.append(ModelCheckpoint(dirpath=run_dir / "checkpoints", filename="epoch{epoch}-step{step}",
                                   auto_insert_metric_name=False, **ck))
    es = cfg.get("early_stopping")
    if es:
        out.append(EarlyStopping(**es))
    maps = cfg.get("attention_maps")
    if maps:
        out.append(AttentionMaps(run_dir / "attention", **maps))
    bar = cfg.get("progress_bar", "rich")
    if bar == "rich":
        out.append(RichProgressBar())
    elif bar == "tqdm":
        out.append(TQDMProgressBar())
    if cfg.get("lr_monitor"):
        out.append(LearningRateMonitor(logging_interval="step"))
    return out


def _write_json(path: Path, data: dict) -> None:
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True))
    os.replace(tmp, path)


def _metrics(results: List[dict]) -> Dict[str, float]:
    out: Dict[str, float] = {}
    for r in results or []:
        out.update({k: float(v) for k, v in r.items()})
    return out


def train(cfg: DictConfig | Dict[str, Any], run_dir: Path | str) -> Dict[str, Any]:
    """Validate, build, fit, evaluate; return (and write) the final metrics."""
    run_dir = Path(run_dir)
    resolved = OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else dict(cfg)
    validate_config(resolved)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(OmegaConf.create(resolved)))

    pl.seed_everything(resolved.get("seed", 1234), workers=True, verbose=False)
    dm = DATA.build(resolved["data"], path="data")
    if hasattr(dm, "set_run_dir"):  # data modules that keep files with the run (tokenizers)
        dm.set_run_dir(run_dir)
    model = MODELS.build(resolved["model"], path="model", **dm.model_context())
    task = TASKS.build(resolved["task"], model, path="task", **dm.task_context())
    if hasattr(dm, "save_artifacts"):  # what prediction needs besides weights (e.g. a vocabulary)
        dm.save_artifacts(run_dir)
    task.run_config = resolved
    logger = LOGGERS.build(resolved["logger"], str(run_dir), path="logger")
    callbacks = build_callbacks(resolved.get("callbacks") or {}, run_dir)
    bar = (resolved.get("callbacks") or {}).get("progress_bar", "rich")
    trainer = pl.Trainer(**(resolved.get("trainer") or {}), logger=logger, callbacks=callbacks,
                         default_root_dir=str(run_dir), enable_progress_bar=bar not in ("none", None))
    failed = True
    start = time.time()
    try:
        if logger:
            logger.log_hyperparams(resolved)
        trainer.fit(task, datamodule=dm, ckpt_path=resolved.get("ckpt_path"))
        fit_time = time.time() - start
        best = trainer.checkpoint_callback.best_model_path if trainer.checkpoint_callback else ""
        ckpt = best or None
        metrics = _metrics(trainer.validate(task, datamodule=dm, ckpt_path=ckpt, verbose=False))
        if resolved.get("test", True):
            metrics.update(_metrics(trainer.test(task, datamodule=dm, ckpt_path=ckpt, verbose=False)))
        summary = {
            "metrics": metrics,
            "best_checkpoint": best,
            "epochs": trainer.current_epoch,
            "global_step": trainer.global_step,
            "fit_seconds": round(fit_time, 2),
            "parameters": sum(p.numel() for p in model.parameters()),
        }
        if trainer.is_global_zero:
            _write_json(run_dir / "metrics.json", summary)
        failed = False
        return summary
    finally:
        if isinstance(logger, WandbLogger):
            import wandb

            wandb.finish(exit_code=1 if failed else 0)
