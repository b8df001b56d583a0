"""A sweep's job, before any work: ``optimized_metric`` is a metric the run reports, and an
Optuna study seeks its better end (docs/sweeps.md)."""

from __future__ import annotations

from typing import Any, List, Optional

from omegaconf import ListConfig

from attnflow.config.registry import TASKS, ConfigError, suggest
from attnflow.training.trainer_checks import reads_no_batch
from attnflow.training.validate import metric_names


def _unread_split(cfg: Any, split: str) -> Optional[str]:
    """Why a run of ``cfg`` reports no metric of ``split`` at its end, or None."""
    if split == "test" and not cfg.get("test", True):
        return "test=false: no test metrics"
    limit = (cfg.get("trainer") or {}).get(f"limit_{split}_batches")
    if reads_no_batch(limit):
        return f"trainer.limit_{split}_batches={limit}: the final {split} pass reads no batch"
    return None


def final_metric_names(cfg: Any) -> list:
    """The metrics a run of ``cfg`` reports in ``metrics.json``."""
    splits = tuple(s for s in ("val", "test") if not _unread_split(cfg, s))
    return metric_names(TASKS.get(cfg["task"]["name"]), cfg, splits) if splits else []


def check_optimized_metric(cfg: Any) -> Optional[str]:
    """``cfg.optimized_metric`` (None: unset), or a :class:`ConfigError` naming the metrics."""
    metric = cfg.get("optimized_metric")
    if not metric:
        return None
    names = final_metric_names(cfg)
    if metric in names:
        return metric
    split = str(metric).split("/", 1)[0]
    why = _unread_split(cfg, split) if split in ("val", "test") else None
    off = f" ({why})" if why else ""
    field = getattr(TASKS.get(cfg["task"]["name"]), "conditional_metrics", {}).get(
        str(metric).rsplit("/", 1)[-1])
    if field and not why:  # a metric of the task that this config switches off
        off = f" (with task.{field}={cfg['task'].get(field) or 0}: it is logged where task.{field} > 0)"
    raise ConfigError(f"optimized_metric '{metric}' (at 'optimized_metric') is not a metric that "
                      f"task '{cfg['task']['name']}' reports at the end of a run{off}; it reports "
                      f"{', '.join(names) or 'nothing'}.{suggest(str(metric), names)}")


def _directions(direction: Any) -> List[str]:
    """An Optuna sweeper's ``direction`` as lower-case names, one per objective."""
    items = direction if isinstance(direction, (list, tuple, ListConfig)) else [direction]
    return [str(getattr(d, "name", d)).lower() for d in items]


def check_direction(cfg: Any, sweeper: Any) -> None:
    """An Optuna sweep needs ``optimized_metric``, and a ``direction`` that seeks its better end."""
    if "optuna" not in str(sweeper.get("_target_", "")).lower():
        return
    metric, direction = cfg.get("optimized_metric"), sweeper.get("direction")
    if not metric:
        raise ConfigError("an Optuna sweep needs optimized_metric, the metric each job returns to "
                          "the study; set one (e.g. optimized_metric=val/loss)")
    names = _directions(direction) if direction is not None else []
    mode = (getattr(TASKS.get(cfg["task"]["name"]), "metrics", None) or {}).get(metric.rsplit("/", 1)[-1])
    wanted = {"max": "maximize", "min": "minimize"}.get(mode)
    if len(names) == 1 and wanted and names[0] != wanted:
        default = "" if isinstance(direction, str) else " (the sweeper's default: none was set)"
        raise ConfigError(f"optimized_metric={metric} is better {'higher' if mode == 'max' else 'lower'} "
                          f"(task '{cfg['task']['name']}'), but hydra.sweeper.direction={names[0]}{default} "
                          f"would seek the worst runs: set hydra.sweeper.direction={wanted}")
