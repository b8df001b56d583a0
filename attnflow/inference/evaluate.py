"""A trained run evaluated: its config with ``attnflow-eval``'s overrides applied and checked
(another split, data set or data module of the same kind, task and trainer fields), and its
task rebuilt and validated or tested by Lightning's Trainer on that data, nothing trained."""

from __future__ import annotations

import sys
import tempfile
import time
import warnings
from datetime import datetime
from typing import Any, Dict, List, Tuple

from omegaconf import OmegaConf

from attnflow import config_dir
from attnflow.config.overrides import parsed
from attnflow.config.registry import DATA, MODELS, TASKS, AttnflowWarning, ConfigError, suggest
from attnflow.inference.runs import data_module, rebuild
from attnflow.io.checkpoints import Run, run_artifacts

TRAINER_FIELDS = ("accelerator", "devices", "precision", "limit_val_batches", "limit_test_batches")
SPLITS = ("val", "test")
USAGE = ("split=val|test, data.<field>, task.<field>, seed, trainer." + "|".join(TRAINER_FIELDS))


def parse_overrides(items: List[str]) -> List[Tuple[str, Any]]:
    """``key=value`` strings as (key, value as Hydra parses it) pairs, in order."""
    out, given = [], {}
    for item, override in parsed(items):
        if override is None or override.is_delete() or "=" not in item:
            raise ConfigError(f"'{item}' is not an override: write key=value ({USAGE})")
        key = override.key_or_group
        if key in given:
            raise ConfigError(f"{key} is given twice ({given[key]}, {item}): give it once")
        given[key] = item
        out.append((key, override.value()))
    return out


def _data_preset(name: str, run_cfg: Dict[str, Any]) -> Dict[str, Any]:
    """The fields of ``conf/data/<name>.yaml``, resolved against the run's ``paths`` and ``seed``."""
    path = config_dir() / "data" / f"{name}.yaml"
    if not path.is_file():
        return {"name": name}
    root = OmegaConf.create({"paths": run_cfg.get("paths") or {}, "seed": run_cfg.get("seed", 1234),
                             "data": OmegaConf.load(path)})
    return OmegaConf.to_container(root, resolve=True)["data"]


def apply_overrides(run: Run, overrides: List[Tuple[str, Any]]) -> Tuple[Dict[str, Any], str, Dict[str, Any]]:
    """(config to evaluate with, split, trainer fields): the run's config with ``overrides``
    applied and validated against the registries."""
    cfg = {k: (dict(v) if isinstance(v, dict) else v) for k, v in run.config.items()}
    split, trainer, keys = None, {}, [k for k, _ in overrides]
    new_name = dict(overrides).get("data.name")
    if new_name is not None and new_name != cfg["data"].get("name"):
        DATA.get(str(new_name), "data")
        cfg["data"] = _data_preset(str(new_name), cfg)
    for key, value in overrides:
        head, _, field = key.partition(".")
        if key == "split":
            if value not in SPLITS:
                raise ConfigError(f"split must be 'val' or 'test', got {value!r}")
            split = value
        elif key == "seed":
            if not isinstance(value, int) or isinstance(value, bool):
                raise ConfigError(f"seed must be an integer, got {value!r}")
            cfg["seed"] = value
        elif head in ("data", "task") and field and "." not in field:
            cfg[head][field] = value
        elif head == "trainer" and field in TRAINER_FIELDS:
            trainer[field] = value
        else:
            known = ["split", "seed", *(f"trainer.{f}" for f in TRAINER_FIELDS)]
            raise ConfigError(f"attnflow-eval has no override '{key}'; overrides: {USAGE}."
                              f"{suggest(key, known)}")
    cfg["data"] = DATA.validate(cfg["data"], "data")
    _check_kinds(cfg)
    cfg["task"] = TASKS.validate(cfg["task"], "task")
    if split is None:  # the test split, unless the run has none and no override names one
        split = "test" if run.config.get("test", True) or any(
            k.startswith("data.test") for k in keys) else "val"
    other = f"limit_{'val' if split == 'test' else 'test'}_batches"
    if other in trainer:
        warnings.warn(f"trainer.{other} is not read: split={split} evaluates the {split} split",
                      AttnflowWarning)
    _check_run_fixed(keys, cfg, run.config.get("data") or {})
    return cfg, split, trainer


def _check_kinds(cfg: Dict[str, Any]) -> None:
    """The data gives what the run's model works on (its ``interface``), else a ConfigError."""
    from attnflow.training.validate import INTERFACES

    data_kind = DATA.get(cfg["data"]["name"]).interface
    model_kind = MODELS.get(cfg["model"]["name"]).interface
    if data_kind and model_kind and data_kind != model_kind:
        same = [n for n in DATA.names() if DATA.get(n).interface == model_kind]
        raise ConfigError(f"data '{cfg['data']['name']}' gives {INTERFACES.get(data_kind, data_kind)}, "
                          f"but the run's model '{cfg['model']['name']}' works on "
                          f"{INTERFACES.get(model_kind, model_kind)}: evaluate it on data of its "
                          f"kind ({', '.join(same)})")


def _check_run_fixed(keys: List[str], cfg: Dict[str, Any], trained: Dict[str, Any]) -> None:
    """A field the model is bound to (the data's ``run_fixed``: the translation direction) given
    another value than the run's is an error."""
    fixed = [f for f in DATA.get(cfg["data"]["name"]).run_fixed if f"data.{f}" in keys]
    if not fixed or trained.get("name") != cfg["data"]["name"]:
        return
    before = DATA.validate(trained, "data")  # with the defaults the stored config left out
    for f in fixed:
        if cfg["data"].get(f) != before.get(f):
            raise ConfigError(f"data.{f}={cfg['data'].get(f)}: the run was trained with data.{f}="
                              f"{before.get(f)}, and its model fits only that; evaluate a run "
                              f"trained for the other setting")


def evaluate_run(run: Run, cfg: Dict[str, Any], split: str, trainer_fields: Dict[str, Any],
                 overrides: List[str], device: str) -> Dict[str, Any]:
    """Lightning's Trainer (``device`` and the ``trainer.*`` overrides) validates or tests the
    rebuilt task (``cfg``: the run's config with the overrides applied): the summary of the
    metrics, the split, the run, its data config and the overrides."""
    import pytorch_lightning as pl

    from attnflow.training.precision import resolve_precision
    from attnflow.training.trainer_checks import lightning_errors

    start = time.time()
    fields, note, warn = resolve_precision({"accelerator": device, "precision": "32-true", **trainer_fields})
    if note:  # trainer.precision=auto
        print(f"attnflow-eval: {'warning: ' if warn else ''}{note}", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="attnflow-eval-") as scratch:  # task side files
        with lightning_errors():  # what Lightning refuses of the fields: one message
            trainer = pl.Trainer(accelerator=fields["accelerator"], devices=fields.get("devices", 1),
                                 precision=fields["precision"], limit_val_batches=fields.get("limit_val_batches"),
                                 limit_test_batches=fields.get("limit_test_batches"), logger=False,
                                 enable_checkpointing=False, enable_progress_bar=False,
                                 enable_model_summary=False, default_root_dir=scratch)
        pl.seed_everything(cfg.get("seed", 1234), workers=True, verbose=False)
        dm = data_module(run, cfg)  # (${oc.env:…} as recorded: its value for the work only)
        dm.setup_evaluation(run.run_dir, run_artifacts(run), split)
        ctx = dm.model_context()
        sizes = ", ".join(f"{k}={v}" for k, v in ctx.items() if type(v) is int and k != "pad_id")
        task = rebuild(run, ctx, f" built for data '{cfg['data']['name']}'" + (f" ({sizes})" if sizes else ""),
                       dm.task_context(), config=cfg)
        task.run_config = cfg
        results = (trainer.validate if split == "val" else trainer.test)(task, datamodule=dm, verbose=False)
    metrics = {k: float(v) for r in results or [] for k, v in r.items()}
    if not metrics:
        raise ValueError(f"the {split} split gave no metrics (is it empty?)")
    summary = {"metrics": metrics, "split": split, "run_dir": str(run.run_dir),
               "checkpoint": str(run.checkpoint), "data": cfg["data"], "overrides": list(overrides),
               "seconds": round(time.time() - start, 2),
               "created": datetime.now().isoformat(timespec="seconds")}
    if isinstance(task, TASKS.get("translation")) and task.bleu_signature:
        summary["bleu_signature"] = task.bleu_signature
    return summary
