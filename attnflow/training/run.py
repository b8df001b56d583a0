"""One training run, from a config to its run directory: ``config.yaml``, ``checkpoints/``,
``attention/``, ``metrics.json`` and the loggers' files.

The config is validated and the Trainer built (Lightning checks its own arguments) before the
run directory is written or any data made; then data, model and task are built, fitted, and the
best checkpoint validated and tested. ``metrics.json`` is written atomically at the end.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Dict, List, Optional, Sequence

import pytorch_lightning as pl
import torch
from omegaconf import DictConfig
from pytorch_lightning.callbacks import LearningRateMonitor, ModelCheckpoint
from pytorch_lightning.utilities import rank_zero_only, rank_zero_warn

import attnflow  # noqa: F401  (the ${attnflow_root:} resolver of conf/paths)
from attnflow.config import secrets
from attnflow.config.registry import DATA, MODELS, TASKS, AttnflowWarning, ConfigError
from attnflow.io.console import warn_unread
from attnflow.io.labels import save_labels
from attnflow.io.metric_names import BEST
from attnflow.io.text import write_json
from attnflow.training import averaging, requeue, resume, runlock, runlog, state as training_state
from attnflow.training.callbacks import (CompiledModel, Float32MatmulPrecision, StopOnNonFiniteLoss,
                                         SummaryFields, WarmEarlyStopping)
from attnflow.training.distributed import continue_csv_logs, fit_progress
from attnflow.training.ema import ExponentialMovingAverage
from attnflow.training.loggers import (build_loggers, finish_loggers, log_hyperparams, logger_inputs,
                                       run_identity, summarize_loggers)
from attnflow.training.precision import resolve_precision
from attnflow.training.progress import progress_bar
from attnflow.training.trainer_checks import (idle_settings, lightning_errors,
                                              refuse_flex_without_backward)
from attnflow.training.validate import resolve_config
from attnflow.viz.panels import AttentionMaps


def _with_task_monitor(entry: Dict[str, Any], task: Any) -> Dict[str, Any]:
    """``entry`` with a null ``monitor``/``mode`` taken from the task (none: left out)."""
    entry = {k: v for k, v in entry.items() if v is not None or k not in ("monitor", "mode")}
    if task is not None:
        monitor = entry.setdefault("monitor", task.monitor)
        entry.setdefault("mode", task.monitor_mode if monitor == task.monitor
                         else task.metrics.get(monitor.split("/", 1)[-1], "min"))
    return entry


def build_callbacks(cfg: Dict[str, Any], run_dir: Path, task: Any = None) -> List[pl.Callback]:
    """The callbacks of the ``callbacks`` config ``cfg``; a null ``monitor``/``mode`` is the
    ``task``'s (a task class, or :func:`task_monitor`)."""
    out: List[pl.Callback] = [StopOnNonFiniteLoss()]
    ck = cfg.get("checkpoint")  # ({}: its defaults; only null is off)
    if ck is not None:
        ck = dict(ck)
        save_last = ck.pop("save_last", True)
        if (ck.get("save_top_k", 1) == 0 and ck.get("monitor") is None
                and ck.get("mode") is not None and cfg.get("average") is None):
            warn_unread(f"callbacks.checkpoint.mode={ck['mode']}", "save_top_k=0 ranks nothing")
        out.append(training_state.RunCheckpoint(
            dirpath=run_dir / "checkpoints", filename="epoch{epoch}-step{step}",
            auto_insert_metric_name=False, **_with_task_monitor(ck, task)))
        if save_last:  # (Lightning's own last.ckpt follows top-k saves only)
            out.append(training_state.LastCheckpoint(run_dir))
    es, maps, ema, avg = (cfg.get(k) for k in ("early_stopping", "attention_maps", "ema", "average"))
    if es is not None:
        out.append(WarmEarlyStopping(**_with_task_monitor(es, task)))
    if maps is not None:
        out.append(AttentionMaps(run_dir / "attention", **maps))
    out += [bar for bar in [progress_bar(cfg.get("progress_bar", "auto"))] if bar is not None]
    out += [LearningRateMonitor(logging_interval="step")] if cfg.get("lr_monitor") else []
    if ema is not None:  # before callbacks.average, which keeps θ̄
        out.append(ExponentialMovingAverage(**ema))
    if avg is not None:
        watch = _with_task_monitor(averaging.monitor_of(avg, cfg.get("checkpoint")), task)
        out.append(averaging.CheckpointAverage(run_dir, avg.get("last"), avg.get("best"),
                                               watch.get("monitor"), watch.get("mode")))
    return out


def record_failure(run_dir: Path, reason: str, **fields: Any) -> None:
    """Record ``failed: reason`` in a written ``metrics.json`` (attnflow-report's status); with
    ``fields`` (a sweep's trial), in a new one where the run wrote none."""
    path = Path(run_dir) / "metrics.json"
    if rank_zero_only.rank != 0 or not (path.is_file() or fields and path.parent.is_dir()):
        return
    write_json(path, {**(json.loads(path.read_text()) if path.is_file() else fields), "failed": reason},
               indent=2, sort_keys=True)


def _metrics(results: List[dict]) -> Dict[str, float]:
    return {k: float(v) for r in results or [] for k, v in r.items()}


def _last_epoch(trainer: pl.Trainer) -> Dict[str, float]:
    """The ``val/`` curves' last points, as the fit logged them (the loggers' last values; under
    ddp_spawn only ``callback_metrics`` come back): read before the next validation resets them."""
    return {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("val/")}


def _validate_as(prefix: str, trainer: pl.Trainer, task: Any, **how: Any) -> Dict[str, float]:
    """The validation metrics of the weights ``how`` names, logged and returned as
    ``<prefix>val/…``: the ``val/`` curves keep one point per epoch trained."""
    maps = [cb for cb in trainer.callbacks if isinstance(cb, AttentionMaps)]
    for logs in (task, *maps):  # (the pictures of those weights: under <prefix>val/attention/…)
        logs.logged_as = prefix
    continue_csv_logs(trainer)  # (ddp_spawn: one CSV writer for every stage)
    try:
        return _metrics(trainer.validate(task, **how))
    finally:
        for logs in (task, *maps):
            logs.logged_as = ""


def train(cfg: DictConfig | Dict[str, Any], run_dir: Path | str,
          callbacks: Sequence[pl.Callback] = ()) -> Dict[str, Any]:
    """Validate, build, fit, evaluate; return (and write) the final metrics. ``callbacks`` join
    the config's; those with ``summary_fields()`` add fields to ``metrics.json``. A value from
    ``${oc.env:…}`` is used, but written as its interpolation (:mod:`attnflow.config.secrets`)."""
    run_dir, hidden = Path(run_dir), secrets.find(cfg)
    resolved = resolve_config(cfg)
    resolved.update(run_identity(cfg, resolved))  # run name/experiment/group, tags
    recorded = secrets.recorded(resolved, hidden)
    matmul, found = resolved.get("float32_matmul_precision"), torch.get_float32_matmul_precision()
    if matmul:  # (ddp_spawn's processes: the callback)
        torch.set_float32_matmul_precision(matmul)
    try:
        trainer = build_trainer(resolved, run_dir, callbacks, recorded)  # before any file or data
        refuse_flex_without_backward(resolved["model"], trainer)
        run_dir.mkdir(parents=True, exist_ok=True)
        with runlock.holding(run_dir), runlog.recording(run_dir):
            fit_from = resume.start(resolved, run_dir, recorded)
            runlog.say(f"run folder: {run_dir}")
            pl.seed_everything(resolved.get("seed", 1234), workers=True, verbose=False)
            return _train(resolved, trainer, run_dir, fit_from, recorded)
    finally:
        torch.set_float32_matmul_precision(found)


def task_monitor(task_cfg: Dict[str, Any]) -> SimpleNamespace:
    """The task's monitor and metric modes from its config (a multitask's add ``<task>/<metric>``)."""
    cls = TASKS.get(task_cfg["name"])
    metrics = dict(cls.metrics)
    for name, entry in (task_cfg.get("tasks") or {}).items():  # (validated: each names its task)
        metrics.update({f"{name}/{m}": mode for m, mode in TASKS.get(entry["task"]["name"]).metrics.items()})
    return SimpleNamespace(monitor=cls.monitor, monitor_mode=cls.monitor_mode, metrics=metrics)


def build_trainer(resolved: Dict[str, Any], run_dir: Path, extra: Sequence[pl.Callback] = (),
                  recorded: Optional[Dict[str, Any]] = None) -> pl.Trainer:
    """The run's Trainer with its loggers (given the ``recorded`` config: :func:`logger_inputs`)
    and callbacks; a setting left unread is one warning line (a callback so named is not built)."""
    trainer_args, note, warn = resolve_precision(dict(resolved.get("trainer") or {}))
    if note:
        (rank_zero_warn if warn else runlog.say)(note)
    wanted = dict(resolved.get("callbacks") or {})
    for key, why in idle_settings(resolved, TASKS.get(resolved["task"]["name"])).items():
        rank_zero_warn(why, category=AttnflowWarning)
        if key.startswith("callbacks."):
            wanted[key.split(".", 1)[1]] = None
    logger_cfg, identity = logger_inputs(resolved, recorded or resolved)
    logger = build_loggers(logger_cfg, run_dir, identity)  # [] for none
    if wanted.get("lr_monitor") is None:  # (null: the learning rate goes to the loggers chosen)
        wanted["lr_monitor"] = bool(logger)
    callbacks = [*build_callbacks(wanted, run_dir, task_monitor(resolved["task"])), *extra,
                 runlog.EpochLog()]
    if trainer_args.pop("enable_model_summary", True):  # (Lightning's: a FLOPs column of zeros)
        callbacks.append(runlog.ModelTable())
    if trainer_args.pop("compile", False):  # (attnflow's field, not the Trainer's)
        callbacks.append(CompiledModel())
    if resolved.get("float32_matmul_precision"):
        callbacks.append(Float32MatmulPrecision(resolved["float32_matmul_precision"]))
    bar = wanted.get("progress_bar", "auto")
    with lightning_errors():
        return pl.Trainer(**trainer_args, logger=logger or False,
                          callbacks=[*callbacks, *training_state.callbacks(
                              run_dir, (resolved.get("paths") or {}).get("output_root"))],
                          plugins=[training_state.SafeCheckpointIO(), *requeue.plugins()],
                          default_root_dir=str(run_dir), enable_progress_bar=bar not in ("none", None),
                          enable_model_summary=False,
                          enable_checkpointing=any(isinstance(c, ModelCheckpoint) for c in callbacks))


def _train(resolved: Dict[str, Any], trainer: pl.Trainer, run_dir: Path, fit_from: Any,
           recorded: Dict[str, Any]) -> Dict[str, Any]:
    """:func:`train` from the data on; ``recorded`` goes to the checkpoints and loggers."""
    failed = True
    try:
        dm = DATA.build(resolved["data"], path="data")
        if not resolved.get("test", True):
            dm.without_test()  # (test=false: no test file is read)
        dm.set_run_dir(run_dir)  # (tokenizers kept with the run)
        model_cfg = resolved["model"]
        if fit_from and model_cfg.get("init_from"):  # the checkpoint holds every weight
            model_cfg = {**model_cfg, "init_from": None}
        model = MODELS.build(model_cfg, path="model", **dm.model_context())
        task = TASKS.build(resolved["task"], model, path="task", **dm.task_context())
        why = dm.missing_test() if resolved.get("test", True) else None
        if why:
            raise ConfigError(why)
        dm.save_artifacts(run_dir)  # (e.g. a vocabulary, for prediction)
        if runlock.first_rank():
            save_labels(run_dir, dm.label_names())
        task.run_config = recorded
        start = time.time()
        log_hyperparams(trainer.loggers, recorded)
        continue_csv_logs(trainer)  # (ddp_spawn: one CSV writer for every stage)
        with lightning_errors(own_only=True):  # (what it refuses as the fit starts: one line)
            trainer.fit(task, datamodule=dm, ckpt_path=fit_from, weights_only=True)
        fit_time = round(time.time() - start, 2)
        summary = _evaluate(trainer, task, dm, run_dir, resolved.get("test", True))
        summary.update(fit_seconds=fit_time, parameters=sum(p.numel() for p in model.parameters()))
        for callback in trainer.callbacks:
            if isinstance(callback, SummaryFields):
                summary.update(callback.summary_fields())
        if trainer.is_global_zero:
            write_json(run_dir / "metrics.json", summary, indent=2, sort_keys=True)
            runlog.log_final_table(summary)
            summarize_loggers(trainer.loggers, summary)
        failed = False
        return summary
    finally:
        finish_loggers(trainer.loggers, failed)


def _evaluate(trainer: pl.Trainer, task: Any, dm: Any, run_dir: Path, test: bool) -> Dict[str, Any]:
    """``metrics.json``'s fields: the ``val/`` curves' last points, the best (or averaged)
    checkpoint validated (``best/val/…``) and tested (``test/…``)."""
    last = _last_epoch(trainer)
    best = trainer.checkpoint_callback.best_model_path if trainer.checkpoint_callback else ""
    epochs, global_step = fit_progress(trainer, run_dir / "checkpoints")
    best_of = dict(datamodule=dm, ckpt_path=best or None, verbose=False, weights_only=True)
    averaged = averaging.finish(trainer, run_dir, best)
    out: Dict[str, Any] = {}
    if averaged:  # the best single checkpoint's val metrics too, for comparison
        out = dict(best_checkpoint=averaged["path"], best_single_checkpoint=best,
                   metrics_best_single=_validate_as("best_single/", trainer, task, **best_of),
                   averaged_from={k: averaged[k] for k in ("by", "n", "monitor", "epochs", "steps",
                                                           "scores", "files")})
        best_of["ckpt_path"] = averaged["path"]
    metrics = {**last, **_validate_as(BEST, trainer, task, **best_of)}
    if test:
        continue_csv_logs(trainer)
        metrics.update(_metrics(trainer.test(task, **best_of)))
    return {"metrics": metrics, "best_checkpoint": best, "epochs": epochs, "global_step": global_step,
            "precision": str(trainer.precision),
            **out}
