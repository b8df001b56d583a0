"""Experiment loggers by registry name (``csv``, ``tensorboard``, ``wandb``, ``none``): the
``logger`` config maps names to fields (``logger=[csv,wandb]``). W&B runs offline unless
``logger.wandb.mode`` or ``$WANDB_MODE`` says otherwise. :func:`run_identity` names a run from
its experiment and typed overrides (``gat_cora scorer=dot``) and groups a multirun's jobs.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import os
import re
import warnings
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Dict, List, Mapping, Optional, Tuple

import yaml
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from pytorch_lightning.loggers import CSVLogger, TensorBoardLogger, WandbLogger

from attnflow.config.registry import LOGGERS, ConfigError, build_config
from attnflow.io.console import AttnflowWarning, warn_unread
from attnflow.training.wandb_internals import without_anonymous


@LOGGERS.register("csv")
def csv_logger(save_dir: str, identity: Optional[dict] = None):
    """<run dir>/csv/version_N/metrics.csv (a resumed run writes N + 1)."""
    return CSVLogger(save_dir, name="csv")


@LOGGERS.register("tensorboard")
def tensorboard_logger(save_dir: str, identity: Optional[dict] = None):
    """<run dir>/tensorboard/version_N."""
    return TensorBoardLogger(save_dir, name="tensorboard", default_hp_metric=False)


@LOGGERS.register("wandb")
def wandb_logger(save_dir: str, identity: Optional[dict] = None, *, project: Optional[str] = None,
                 entity: Optional[str] = None, group: Optional[str] = None,
                 run_name: Optional[str] = None, tags: List[str] = [], mode: Optional[str] = None,
                 run_id: Optional[str] = None):
    """Weights & Biases in <run dir>/wandb (``$WANDB_DIR/wandb`` where set); a null field is
    W&B's variable (project: else 'attnflow'; mode: else 'offline'), or the run's
    ``run.group``/``run.name``. ``tags`` follow the run's; ``run_id`` resumes that W&B run."""
    identity = identity or {}
    name = run_name or identity.get("name") or Path(save_dir).name
    logger = WandbLogger(project=project or os.environ.get("WANDB_PROJECT") or "attnflow",
                         entity=entity, group=group or identity.get("group"),
                         tags=_unique([*identity.get("tags", []), *tags]), name=_fit(name, 128),
                         save_dir=os.environ.get("WANDB_DIR") or save_dir, mode=mode or os.environ.get("WANDB_MODE") or "offline",
                         id=run_id, resume="allow" if run_id else None,
                         job_type=os.environ.get("WANDB_JOB_TYPE") or "train")
    return without_anonymous(logger)


def _fit(name: str, most: int) -> str:
    """``name`` in at most ``most`` characters (W&B's limit), ending in a digest of the whole."""
    if len(name) <= most:
        return name
    return f"{name[:most - 10]} … {hashlib.sha1(name.encode()).hexdigest()[:7]}"


@LOGGERS.register("none")
def no_logger(save_dir: str, identity: Optional[dict] = None):
    """No experiment logger (metrics.json, checkpoints and pictures are still written)."""
    return False


def validate_loggers(cfg: Any, path: str = "logger") -> Dict[str, Dict[str, Any]]:
    """``{logger name: its fields with defaults}`` of a ``logger`` config, or a :class:`ConfigError`."""
    if cfg is not None and not isinstance(cfg, Mapping):
        raise ConfigError(f"'{path}' must map logger names to their fields (logger=[csv,wandb]), "
                          f"got {cfg!r}")
    out = {}
    for name, fields in (cfg or {}).items():
        if not isinstance(fields, (Mapping, type(None))) or "name" in (fields or {}):
            raise ConfigError(f"'{path}.{name}' must be a mapping of logger '{name}''s fields (the "
                              f"run's name is run.name), got {fields!r}")
        out[name] = LOGGERS.validate({**(fields or {}), "name": name}, f"{path}.{name}")
        out[name].pop("name")
    return out


LOGGER_CONFIG = SimpleNamespace(kind="logger", validate=validate_loggers)


def build_loggers(cfg: Any, run_dir: Path | str, identity: Optional[dict] = None) -> list:
    """The Lightning loggers of a ``logger`` config, in order."""
    built = [LOGGERS.build({**fields, "name": name}, str(run_dir), identity or {}, path=f"logger.{name}")
             for name, fields in validate_loggers(cfg).items()]
    return [logger for logger in built if logger]  # (none: False)


def log_hyperparams(loggers: list, config: Dict[str, Any]) -> None:
    """The resolved config to every logger; the W&B run starts here (what W&B refuses: a
    :class:`ConfigError`)."""
    for logger in loggers:
        if isinstance(logger, WandbLogger):
            import wandb

            try:
                logger.experiment  # wandb.init, on global rank 0
            except (wandb.errors.Error, ValueError) as err:
                raise ConfigError(f"W&B refused to start the run (logger.wandb, $WANDB_*): "
                                  f"{err}") from err
        logger.log_hyperparams(config)


def _wandb_run(loggers: list) -> Any:
    """The W&B run this process started for a chosen W&B logger, or None."""
    if any(isinstance(logger, WandbLogger) for logger in loggers):
        import wandb

        return wandb.run


def summarize_loggers(loggers: list, summary: Dict[str, Any]) -> None:
    """``metrics.json`` into the W&B run's summary, its metrics by the names they were logged
    with (:mod:`attnflow.io.metric_names`); an Optuna trial's state also as a tag."""
    run = _wandb_run(loggers)
    if run is not None:
        run.summary.update({**summary["metrics"], **{k: v for k, v in summary.items() if k != "metrics"}})
        if "trial" in summary:  # an Optuna trial: its state (complete, pruned) as a tag to filter by
            run.tags = (*run.tags, summary["trial"]["state"])


def finish_loggers(loggers: list, failed: bool) -> None:
    """End this job's W&B run (exit code 1 when training failed): one W&B run per job."""
    run = _wandb_run(loggers)
    if run is not None:
        run.finish(exit_code=1 if failed else 0)


# Overrides that say where or how a run is recorded, not what it trains: left out of its name.
NOISE = ("hydra", "paths", "experiment", "logger", "callbacks.progress_bar", "run", "tags",
         "resume", "ckpt_path", "hparams_search", "optimized_metric")


@dataclasses.dataclass
class RunConfig:
    """The ``run`` section: the run's identity; :func:`run_identity` fills in null fields."""

    experiment: Optional[str] = None  # the experiment= choice, else 'default'
    name: Optional[str] = None  # '<experiment> <overrides>'
    group: Optional[str] = None  # the W&B group: the sweep's name in a multirun, else none
    overrides: Optional[List[str]] = None  # as typed, without hydra.*, paths.*, logger, ...


def _unique(items) -> List[str]:
    return list(dict.fromkeys(str(i) for i in items if i not in (None, "")))


def _key(override: str) -> str:
    return override.lstrip("+~").split("=", 1)[0]


def typed_overrides(overrides) -> List[str]:
    """The overrides that change what is trained, as typed (no leading ``+``, no :data:`NOISE`)."""
    return [item.lstrip("+") for item in overrides or ()
            if not any(_key(item) == n or _key(item).startswith((n + ".", n + "/")) for n in NOISE)]


def readable(override: str) -> str:
    """``key=value`` with a float value as a person would write it (4 significant digits: an
    Optuna trial's ``lr=0.042447295225632876`` is named ``lr=0.04245``); the rest as typed."""
    key, eq, value = override.partition("=")
    if not eq or not re.fullmatch(r"[-+]?(\d+\.\d*|\.\d+|\d+)(e[-+]?\d+)?", value.strip(), re.I):
        return override
    number = float(value)
    return f"{key}={number:.4g}" if number != float(f"{number:.4g}") else override


def hydra_config(cfg: Any) -> Any:
    """Hydra's config of this run: its own, else the composed config's ``hydra`` (None outside it)."""
    if HydraConfig.initialized():
        return HydraConfig.get()
    return cfg.get("hydra") if isinstance(cfg, Mapping) else None


def _swept_experiments(sweep_dir: Any) -> Optional[str]:
    """``a,b`` when the sweep's ``multirun.yaml`` sweeps ``experiment=a,b``, else None."""
    try:
        typed = yaml.safe_load((Path(str(sweep_dir)) / "multirun.yaml").read_text())["hydra"]["overrides"]["task"]
    except (OSError, yaml.YAMLError, KeyError, TypeError):
        return None
    return next((o.split("=", 1)[1] for o in typed or () if isinstance(o, str)
                 and _key(o) == "experiment" and "," in o), None)


def sweep_group(label: str, sweep_dir: str) -> str:
    """A multirun's W&B group: its label and the sweep folder's last two parts (without
    'multirun' or the label), e.g. 'default 2025-01-31/12-00-00-123456'."""
    parts = [p for p in Path(str(sweep_dir)).parts[-2:] if p not in ("multirun", label)]
    return " ".join([label, "/".join(parts)]).strip()


def _wandb_identity(run: Dict[str, Any], wandb: Mapping[str, Any], tags: List[Any]) -> List[Any]:
    """``logger.wandb.run_name``/``group`` as the run's name/group, else $WANDB_NAME and
    $WANDB_RUN_GROUP where unset; ``tags`` with $WANDB_TAGS's."""
    for key, field, var in (("name", "run_name", "WANDB_NAME"), ("group", "group", "WANDB_RUN_GROUP")):
        if wandb.get(field) is not None:
            if run[key] not in (None, wandb[field]):
                warn_unread(f"run.{key}={run[key]}", f"logger.wandb.{field}={wandb[field]} names it")
            run[key] = wandb[field]
        elif run[key] is None and os.environ.get(var):
            run[key] = os.environ[var]
    return [*tags, *(t.strip() for t in os.environ.get("WANDB_TAGS", "").split(","))]


def run_identity(cfg: Any, resolved: Dict[str, Any]) -> Dict[str, Any]:
    """``{"run": {experiment, name, group, overrides}, "tags": [...]}``: the ``run`` fields set
    are kept, then W&B's, then Hydra's; outside Hydra the name is "<model> on <data>"."""
    run = dataclasses.asdict(build_config(RunConfig, resolved.get("run"), "run", "run"))
    tags = [] if resolved.get("tags") is None else resolved["tags"]
    if not isinstance(tags, list):
        raise ConfigError(f"tags (at 'tags') must be a list, e.g. tags=[baseline,cpu], got {tags!r}")
    chosen = resolved.get("logger") or {}
    if "wandb" in chosen:
        tags = _wandb_identity(run, chosen["wandb"] or {}, tags)
    hc = hydra_config(cfg)
    if hc is not None:
        choices, sweep_dir = hc.runtime.choices, hc.sweep.dir
        if run["experiment"] is None:
            run["experiment"] = choices.get("experiment") or "default"
        if run["overrides"] is None:
            run["overrides"] = typed_overrides(hc.overrides.task)
        if run["group"] is None and hc.get("mode") in (RunMode.MULTIRUN, "MULTIRUN"):
            label = choices.get("hparams_search") or _swept_experiments(sweep_dir) or run["experiment"]
            run["group"] = sweep_group(label, sweep_dir)
    if run["name"] is None and run["experiment"] is not None:
        run["name"] = " ".join([run["experiment"], *map(readable, run["overrides"] or [])])
    elif run["name"] is None:
        model, data = [(resolved.get(k) or {}).get("name", "?") for k in ("model", "data")]
        run["name"] = f"{model} on {data}"
    return {"run": run, "tags": _unique(tags)}


def logger_identity(resolved: Dict[str, Any]) -> Dict[str, Any]:
    """The identity's name, group and tags (with the experiment)."""
    run = resolved.get("run") or {}
    return {"name": run.get("name"), "group": run.get("group"),
            "tags": _unique([*(resolved.get("tags") or []), run.get("experiment")])}


# W&B's fields that it needs as they are to reach its server; run.tags and logger.wandb.tags too
WANDB_NEEDS = ("entity", "project", "tags")
OFFLINE = ("offline", "disabled", "dryrun")


def logger_inputs(resolved: Dict[str, Any], recorded: Dict[str, Any]) -> Tuple[Any, Dict[str, Any]]:
    """(the ``logger`` config, the identity) the loggers are built with: as recorded (a value
    from ``${oc.env:…}`` as its interpolation), but W&B's entity, project and tags as they are
    where W&B runs online, with one warning line; offline, left out of its files (what
    ``wandb sync`` uploads), with one line."""
    cfg, identity = copy.deepcopy(recorded.get("logger")), logger_identity(recorded)
    if not (isinstance(cfg, dict) and "wandb" in cfg):
        return cfg, identity
    real, kept = (resolved.get("logger") or {}).get("wandb") or {}, dict(cfg["wandb"] or {})
    # the W&B fields (and tags) whose record hides their value
    hidden = [f"logger.wandb.{f}" for f in WANDB_NEEDS if real.get(f) != kept.get(f)]
    hidden += ["tags"] if resolved.get("tags") != recorded.get("tags") else []
    cfg["wandb"] = {**kept, **{f: real[f] for f in ("mode", "run_id") if f in real}}  # (how it runs)
    if not hidden:
        return cfg, identity
    online = (real.get("mode") or os.environ.get("WANDB_MODE") or "offline") not in OFFLINE
    if online:
        cfg["wandb"].update({f: real.get(f) for f in WANDB_NEEDS})
        identity["tags"] = logger_identity(resolved)["tags"]
    else:
        cfg["wandb"].update({f: None for f in ("entity", "project") if f"logger.wandb.{f}" in hidden})
        cfg["wandb"]["tags"] = [t for t in cfg["wandb"].get("tags") or [] if "${oc.env:" not in str(t)]
        identity["tags"] = [t for t in identity["tags"] if "${oc.env:" not in str(t)]
    warnings.warn(f"{', '.join(hidden)} come from the environment (${{oc.env:…}}): " + (
        "W&B gets their values and records them in its run; attnflow's files keep the interpolation"
        if online else "left out of the offline W&B run (its files are what wandb sync uploads; give "
        "--entity/--project there, or run W&B online)"), AttnflowWarning)
    return cfg, identity
