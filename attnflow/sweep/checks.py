"""A sweep's settings before any work: ``optimized_metric`` is a metric (or a list of metrics) the
run reports; an Optuna study seeks each one's better end; a pruner has one ``val/`` metric to watch;
the data files its jobs read are there (docs/sweeps.md)."""

from __future__ import annotations

from typing import Any, Iterable, List, Optional

from omegaconf import ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from attnflow.config.overrides import parsed
from attnflow.config.registry import DATA, TASKS, ConfigError, suggest
from attnflow.training.run import task_monitor
from attnflow.training.trainer_checks import reads_no_batch
from attnflow.training.validate import metric_names
from attnflow.sweep.config import directions
from attnflow.sweep.migration import check_migration
from attnflow.sweep.plugins import is_optuna_sweeper


def _unread_split(cfg: Any, split: str) -> Optional[str]:
    """Why a run of ``cfg`` reports no metric of ``split`` at its end, or None."""
    if split == "test" and not cfg.get("test", True):
        return "test=false: no test metrics"
    limit = (cfg.get("trainer") or {}).get(f"limit_{split}_batches")
    if reads_no_batch(limit):
        return f"trainer.limit_{split}_batches={limit}: the final {split} pass reads no batch"
    return None


def final_metric_names(cfg: Any) -> list:
    """The metrics an ``optimized_metric`` of ``cfg`` may name: ``val/<metric>`` (its value: the
    run's result, ``best/val/<metric>`` in ``metrics.json``) and ``test/<metric>``."""
    splits = tuple(s for s in ("val", "test") if not _unread_split(cfg, s))
    return metric_names(TASKS.get(cfg["task"]["name"]), cfg, splits) if splits else []


def check_optimized_metric(cfg: Any) -> Any:
    """``cfg.optimized_metric`` (None: unset; a list: several objectives), or a
    :class:`ConfigError` naming the metrics the run reports."""
    metric = cfg.get("optimized_metric")
    if isinstance(metric, (list, ListConfig)):
        return [_checked_metric(cfg, m) for m in metric] or None
    return _checked_metric(cfg, metric) if metric else None


def _checked_metric(cfg: Any, metric: Any) -> str:
    names = final_metric_names(cfg)
    if metric in names:
        return metric
    split = str(metric).split("/", 1)[0]
    why = _unread_split(cfg, split) if split in ("val", "test") else None
    off = f" ({why})" if why else ""
    field = TASKS.get(cfg["task"]["name"]).conditional_metrics.get(str(metric).rsplit("/", 1)[-1])
    if field and not why:  # a metric of the task that this config switches off
        off = f" (with task.{field}={cfg['task'].get(field) or 0}: it is logged where task.{field} > 0)"
    raise ConfigError(f"optimized_metric '{metric}' (at 'optimized_metric') is not a metric that "
                      f"task '{cfg['task']['name']}' reports at the end of a run{off}; it reports "
                      f"{', '.join(names) or 'nothing'}.{suggest(str(metric), names)}")


def metric_directions(cfg: Any) -> List[str]:
    """The direction of each ``optimized_metric`` (``hydra.sweeper.direction``, null: each metric's
    better end as its task ranks it); a :class:`ConfigError` where they disagree."""
    metrics = check_optimized_metric(cfg)
    if not metrics:
        raise ConfigError("an Optuna sweep needs optimized_metric, the metric each job returns to "
                          "the study; set one (e.g. optimized_metric=val/loss)")
    metrics = metrics if isinstance(metrics, list) else [metrics]
    wanted = [{"max": "maximize", "min": "minimize"}.get(_mode(cfg, m)) for m in metrics]
    given = cfg.hydra.sweeper.get("direction")
    if given is None:
        unknown = [m for m, w in zip(metrics, wanted) if w is None]
        if unknown:
            raise ConfigError(f"task '{cfg['task']['name']}' does not say whether {unknown[0]} is "
                              f"better higher or lower: set hydra.sweeper.direction")
        return wanted
    found = directions(given)
    if len(found) != len(metrics):
        raise ConfigError(f"hydra.sweeper.direction has {len(found)} entries for {len(metrics)} "
                          f"optimized_metric: one each, in the same order")
    for metric, w, d in zip(metrics, wanted, found):
        if w and d != w:
            raise ConfigError(f"optimized_metric={metric} is better {'higher' if w == 'maximize' else 'lower'} "
                              f"(task '{cfg['task']['name']}'), but hydra.sweeper.direction={d} would "
                              f"seek the worst runs: set it to {w}, or leave it null")
    return found


def _mode(cfg: Any, metric: str) -> Optional[str]:
    """``max`` or ``min``: how the task ranks ``<split>/<metric>`` (None: it does not say)."""
    return task_monitor(cfg["task"]).metrics.get(str(metric).split("/", 1)[-1])


def check_sweep(cfg: Any) -> None:
    """An Optuna sweep (attnflow's sweeper) before Hydra starts: its metrics and directions, and a
    pruner with one ``val/`` metric to watch."""
    sweeper = cfg.hydra.sweeper
    if not is_optuna_sweeper(sweeper.get("_target_")):
        return
    metric_directions(cfg)
    pruner = str((sweeper.get("pruner") or {}).get("_target_", "optuna.pruners.NopPruner"))
    metric = cfg.optimized_metric
    if pruner != "optuna.pruners.NopPruner" and not (isinstance(metric, str) and metric.startswith("val/")):
        raise ConfigError(f"hydra.sweeper.pruner={pruner.rsplit('.', 1)[-1]} watches one validation "
                          f"metric, but optimized_metric={metric}: prune a single val/ metric, or "
                          f"set hydra/sweeper/pruner=none")
    check_migration(sweeper)  # hydra-optuna-sweeper's keys: taken, refused, or a warning


# what, swept, changes the data a sweep's jobs read: each job's own run checks its files
DATA_KEYS = ("data", "paths", "experiment", "hparams_search", "test")


def swept_keys(cfg: Any, argv: Iterable[str]) -> List[str]:
    """The fields and groups a sweep sets per job: the command line's sweeps and
    ``hydra.sweeper.params``' keys."""
    keys = [str(k).lstrip("+~") for k in (cfg.hydra.sweeper.get("params") or {})]
    return keys + [o.key_or_group for _, o in parsed(argv) if o is not None and o.is_sweep_override()]


def check_data_files(cfg: Any) -> None:
    """The data files a run of ``cfg`` reads are there, where its data module can tell without
    reading them (a classmethod ``check_files(fields, test)``): a
    :class:`~attnflow.data.errors.DataFileNotFoundError` names them. A config the run would refuse
    for another reason is left to the run."""
    try:
        data = OmegaConf.to_container(cfg.data, resolve=True)
        cls = DATA.get(data["name"], "data")
        fields = DATA.validate(data, "data")
    except (OmegaConfBaseException, ConfigError, KeyError, TypeError):
        return
    cls.check_files(fields, test=cfg.get("test", True) is not False)


def check_sweep_data(cfg: Any, argv: Iterable[str]) -> None:
    """A multirun's data files before its first job, where every job reads the same data (its
    sweep sets no ``data``, ``paths``, ``experiment`` or ``test``)."""
    if not any(k.split(".")[0].split("@")[0] in DATA_KEYS for k in swept_keys(cfg, argv)):
        check_data_files(cfg)
