"""Experiment loggers by registry name: ``csv`` (default, no account), ``tensorboard``, ``wandb``.

The ``logger`` config is a mapping from logger name to that logger's fields, as in
lightning-hydra-template: ``logger=csv`` gives ``{csv: {}}``, ``logger=[csv,wandb]`` both,
``logger=none`` none; ``logger.wandb.project=x`` sets a field. :func:`validate_loggers` checks it
before any work (unknown names or fields name ``logger.<name>.<field>``), :func:`build_loggers`
makes the Lightning loggers, :func:`summarize_loggers` writes ``metrics.json`` into the W&B run's
summary, :func:`finish_loggers` ends the W&B run whatever happened.

Run identity (:func:`run_identity`): a run is named from its experiment and the overrides the user
typed (``gat_cora scorer=dot task.optim.lr=0.01``), the jobs of a multirun share a W&B group named
after the sweep, and the experiment and ``tags`` become W&B tags. The identity is stored in the
run's config (the ``run`` section: experiment, name, group, overrides), so ``config.yaml`` and the
logged config carry it.

W&B runs offline unless the user configured otherwise (``WANDB_MODE`` in the environment or
``logger.wandb.mode=online``), so no account is needed; ``wandb sync <run dir>/wandb/offline-run-*``
uploads later.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional

from attnflow.config.registry import LOGGERS, ConfigError, suggest

WANDB_MODES = ("offline", "online", "disabled")
# what W&B itself takes from $WANDB_MODE: also its older names (dryrun = offline, run = online)
WANDB_ENV_MODES = (*WANDB_MODES, "dryrun", "run", "shared")


@LOGGERS.register("csv")
def csv_logger(save_dir: str, identity: Optional[dict] = None):
    """Lightning's CSVLogger: <run dir>/csv/version_N/metrics.csv (a resumed run gets N + 1, so
    nothing logged before is rewritten)."""
    from pytorch_lightning.loggers import CSVLogger

    return CSVLogger(save_dir, name="csv")


@LOGGERS.register("tensorboard")
def tensorboard_logger(save_dir: str, identity: Optional[dict] = None):
    """TensorBoard event files in <run dir>/tensorboard/version_N (``tensorboard --logdir outputs``)."""
    from pytorch_lightning.loggers import TensorBoardLogger

    return TensorBoardLogger(save_dir, name="tensorboard", default_hp_metric=False)


@LOGGERS.register("wandb")
def wandb_logger(save_dir: str, identity: Optional[dict] = None, *, project: Optional[str] = None,
                 entity: Optional[str] = None, group: Optional[str] = None,
                 run_name: Optional[str] = None, tags: List[str] = [], mode: Optional[str] = None,
                 run_id: Optional[str] = None):
    """Weights & Biases; files in <run dir>/wandb.

    Args:
        project: the W&B project (default: $WANDB_PROJECT, W&B's own variable, else 'attnflow').
        entity: as in ``wandb.init`` (default: $WANDB_ENTITY, else the account's).
        group: the W&B group (default: the run's ``run.group``: $WANDB_RUN_GROUP, else the
            sweep's name in a multirun).
        run_name: the run's display name (default: ``run.name``: $WANDB_NAME, else
            "<experiment> <overrides>").
        tags: more tags (always added: the top-level ``tags``, $WANDB_TAGS and the experiment's name).
        mode: 'offline', 'online' or 'disabled' (default: $WANDB_MODE, else 'offline').
        run_id: resume this W&B run (default None: a new run).

    The run's W&B job type is ``train`` ($WANDB_JOB_TYPE where set): without one, W&B's runs
    table and its "group by job type" put attnflow's runs under an empty label."""
    from pytorch_lightning.loggers import WandbLogger

    identity = identity or {}
    mode = mode or os.environ.get("WANDB_MODE") or "offline"  # checked by validate_loggers
    project = project or os.environ.get("WANDB_PROJECT") or "attnflow"  # (an explicit project
    # passed to W&B outranks its variable: a fixed default would silently override it)
    all_tags = _unique([*identity.get("tags", []), *tags])
    name = run_name or identity.get("name") or Path(save_dir).name
    logger = WandbLogger(project=project, entity=entity, group=group or identity.get("group"),
                         tags=[t[:64] for t in all_tags], name=_fit(name, 128), save_dir=save_dir,
                         mode=mode, id=run_id, resume="allow" if run_id else None,
                         job_type=os.environ.get("WANDB_JOB_TYPE") or "train")
    # Lightning passes anonymous=None to wandb.init, which W&B (0.19 on) answers on every run with
    # "WARNING The anonymous setting has no effect": a warning about a setting nobody set
    if logger._wandb_init.get("anonymous", "unset") is None:
        del logger._wandb_init["anonymous"]
    return logger


def _fit(name: str, most: int) -> str:
    """``name`` in at most ``most`` characters: a longer one keeps its start and ends with a digest
    of the whole, so two long names that differ only at their end (sweep jobs whose swept value
    comes last) stay apart; the full name is the run's ``run.name`` in its config."""
    if len(name) <= most:
        return name
    import hashlib

    return f"{name[:most - 10]} … {hashlib.sha1(name.encode()).hexdigest()[:7]}"


@LOGGERS.register("none")
def no_logger(save_dir: str, identity: Optional[dict] = None):
    """No experiment logger: the same as an empty ``logger`` mapping (``logger=none``).

    metrics.json, checkpoints and the attention PNGs are still written."""
    return False


# -- the logger mapping ------------------------------------------------------------------------
def _check_mode(mode: Any, path: str) -> None:
    """``logger.wandb.mode``, or where it is null the $WANDB_MODE it falls back to."""
    env = os.environ.get("WANDB_MODE")
    if mode is None and env and env not in WANDB_ENV_MODES:
        raise ConfigError(f"$WANDB_MODE (used since {path} is null) must be one of "
                          f"{', '.join(WANDB_ENV_MODES)}, got {env!r}")
    if mode is not None and mode not in WANDB_MODES:
        raise ConfigError(f"{path} must be one of {', '.join(WANDB_MODES)} (or null: $WANDB_MODE, "
                          f"else offline), got {mode!r}")


def _online(mode: Any) -> bool:
    """Whether W&B would sync as it runs: ``mode``, else $WANDB_MODE (its older names too)."""
    return (mode or os.environ.get("WANDB_MODE") or "offline") in ("online", "run", "shared")


def _check_credentials(mode: Any, path: str) -> None:
    """An online W&B run needs credentials; without them ``wandb.init`` stops the run only after
    the data and the model are made (a bare ``UsageError`` where no terminal can prompt). Looked up
    as W&B does (``WANDB_API_KEY``, the .netrc ``wandb login`` writes, W&B's settings), without
    prompting and without the network; a W&B without this lookup is left to speak for itself."""
    if not _online(mode):
        return
    import wandb

    try:
        from wandb.sdk.lib import wbauth

        found = wbauth.authenticate_session(host=wandb.Settings().base_url, source="attnflow",
                                            prompt=False, update_session=False)
    except (ImportError, AttributeError, TypeError):  # another W&B version: its own error, later
        return
    except Exception as err:  # noqa: BLE001  (W&B's AuthenticationError: a key of the wrong form)
        raise ConfigError(f"{path}: the W&B credentials found are refused: "
                          f"{str(err).splitlines()[0]}") from None
    if found is None:
        where = (f"{path}={mode}" if mode else
                 f"$WANDB_MODE={os.environ.get('WANDB_MODE')} ({path} is null)")
        raise ConfigError(f"{where} syncs to W&B as the run goes, but no W&B credentials were "
                          f"found (WANDB_API_KEY, or the ~/.netrc entry `wandb login` writes): run "
                          f"`wandb login` first, or log offline ({path}=offline) and upload later "
                          f"with `wandb sync <run dir>/wandb/offline-run-*`")


def _check_wandb_names(fields: Mapping[str, Any], path: str) -> None:
    """The W&B names a run would be refused for only when ``wandb.init`` runs, after the data and
    the model are made: W&B's own rules (``wandb.Settings``: no ``/\\#?%:`` in a project, none of
    ``:;,#?/'`` in a run id; the project is $WANDB_PROJECT's where the field is null), and an
    empty name, which W&B would silently replace."""
    for key in ("project", "entity", "group", "run_name", "run_id"):
        if fields.get(key) is not None and not str(fields[key]).strip():
            raise ConfigError(f"{path}.{key} (at '{path}.{key}') is empty: give a name, or null for "
                              f"the default")
    project = fields.get("project")
    if project is None and os.environ.get("WANDB_PROJECT"):  # the project the run would log to
        project, where = os.environ["WANDB_PROJECT"], f"$WANDB_PROJECT (used since {path}.project is null)"
    else:
        where = f"{path}.project (at '{path}.project')"
    if project is None and fields.get("run_id") is None:
        return
    import wandb

    try:
        wandb.Settings(project=project, run_id=fields.get("run_id"))
    except Exception as err:  # noqa: BLE001  (wandb's UsageError, pydantic's ValidationError)
        where = f"{path}.run_id (at '{path}.run_id')" if "Run ID" in str(err) else where
        raise ConfigError(f"{where} is refused by W&B: {_reason(err)}") from None


def _reason(err: Exception) -> str:
    """W&B's own words for a refused setting: pydantic's 'Value error, …' line where there is one
    (its first line only says '1 validation error for Settings'), else the first line."""
    import re

    found = re.search(r"Value error, (.*?)(?: \[type=|$)", str(err), re.M)
    return found.group(1) if found else str(err).splitlines()[0]


def _check_wandb_tags(tags: Any, where: str) -> None:
    """Tags W&B refuses (empty, or over 64 characters; ``wandb.Settings``) are refused here, before
    any work, rather than cut or dropped unseen on their way to ``wandb.init``."""
    import wandb

    try:
        wandb.Settings(run_tags=tuple(str(t) for t in tags or ()))
    except Exception as err:  # noqa: BLE001  (pydantic's ValidationError)
        raise ConfigError(f"{where} is refused by W&B: {_reason(err)}") from None


def validate_loggers(cfg: Any, path: str = "logger") -> Dict[str, Dict[str, Any]]:
    """``{logger name: fields with defaults}`` of a ``logger`` config, or :class:`ConfigError`."""
    if cfg is None:
        return {}
    if isinstance(cfg, str):  # `logger: wandb` in a hand-written config
        cfg = {cfg: {}}
    if not isinstance(cfg, Mapping):
        raise ConfigError(f"'{path}' must be a mapping from logger name to its fields, e.g. "
                          f"{{csv: {{}}, wandb: {{project: x}}}} (choose with logger=csv, "
                          f"logger=[csv,wandb] or logger=none); got {cfg!r}")
    names = LOGGERS.names()
    if isinstance(cfg.get("name"), str) and "name" not in names:
        raise ConfigError(f"'{path}.name' is the old layout of the logger config; '{path}' now maps "
                          f"logger names to their fields: {path}: {{{cfg['name']}: {{}}}} (on the "
                          f"command line: logger={cfg['name']})")
    out: Dict[str, Dict[str, Any]] = {}
    for name, fields in cfg.items():
        if name not in names:
            raise ConfigError(f"unknown logger '{name}' at '{path}.{name}'. Registered loggers: "
                              f"{', '.join(names)} (several: logger=[csv,wandb]).{suggest(str(name), names)}")
        fields = {} if fields is None else fields
        if not isinstance(fields, Mapping):
            raise ConfigError(f"'{path}.{name}' must be a mapping of logger '{name}''s fields "
                              f"(attnflow-blocks logger lists them), got {fields!r}")
        if "name" in fields:
            allowed = [f for f, _, _ in LOGGERS.fields(name)]
            raise ConfigError(f"logger '{name}' has no field 'name' (at '{path}.{name}.name'); its "
                              f"fields: {', '.join(allowed) or '(none)'}. The run's name is "
                              f"run.name (or logger.wandb.run_name)")
        checked = LOGGERS.validate({**fields, "name": name}, f"{path}.{name}")
        checked.pop("name")
        if name == "wandb":
            _check_mode(checked.get("mode"), f"{path}.{name}.mode")
            _check_credentials(checked.get("mode"), f"{path}.{name}.mode")
            _check_wandb_names(checked, f"{path}.{name}")
            _check_wandb_tags(checked.get("tags"), f"{path}.{name}.tags (at '{path}.{name}.tags')")
        out[name] = checked
    return out


class LoggerConfig:
    """What ``validate_config`` (``attnflow.training.validate.BLOCK_GROUPS``) and ``attnflow-blocks --config``
    call for the ``logger`` group: a registry-like ``validate`` of the whole mapping."""

    kind = "logger"

    def validate(self, cfg: Any, path: str = "logger") -> Dict[str, Dict[str, Any]]:
        return validate_loggers(cfg, path)


LOGGER_CONFIG = LoggerConfig()


def build_loggers(cfg: Any, run_dir: Path | str, identity: Optional[dict] = None) -> list:
    """The Lightning loggers of a ``logger`` config ([] for none), in the order given."""
    out = []
    for name, fields in validate_loggers(cfg).items():
        logger = LOGGERS.build({**fields, "name": name}, str(run_dir), identity or {},
                               path=f"logger.{name}")
        if logger:
            out.append(logger)
    return out


def log_hyperparams(loggers: list, config: Dict[str, Any]) -> None:
    """The resolved config (with its ``run`` identity and ``tags``) to every logger."""
    for logger in loggers:
        logger.log_hyperparams(config)


def summarize_loggers(loggers: list, summary: Dict[str, Any], last_epoch: Mapping[str, Any]) -> None:
    """``metrics.json`` in the W&B run's summary (the runs table's columns), so that it does not
    merely hold whatever was logged last: its metrics under their names there (``val/acc``, of
    the checkpoint validated after training: the best, or the average), its other fields as
    they are (``best_checkpoint``, ``epochs``, ...), and the last epoch's values of the same
    metrics as ``last_epoch/<name>``, which the best checkpoint's validation would overwrite."""
    last = {f"last_epoch/{k}": float(v) for k, v in last_epoch.items() if k in summary["metrics"]}
    for logger in loggers:
        run = getattr(logger, "_experiment", None)  # only a run this logger started (rank 0)
        if run is not None and hasattr(run, "summary"):
            run.summary.update({**summary["metrics"], **{k: v for k, v in summary.items()
                                                        if k != "metrics"}, **last})


def finish_loggers(loggers: list, failed: bool) -> None:
    """End the W&B run of this job (exit code 1 when training failed), so that each job of a
    multirun gets its own run; called in ``finally``. Other loggers flush themselves."""
    for logger in loggers:
        run = getattr(logger, "_experiment", None)  # only a run this logger started (rank 0)
        if run is not None and hasattr(run, "finish"):
            run.finish(exit_code=1 if failed else 0)


# -- run identity --------------------------------------------------------------------------------
# Overrides that say where or how a run is recorded, not what it trains: left out of its name.
NOISE = ("hydra", "paths", "experiment", "logger", "callbacks.progress_bar", "run", "tags",
         "resume", "ckpt_path", "hparams_search", "optimized_metric")
RUN_FIELDS = {"experiment": "the experiment's name (default: the experiment= choice, else 'default')",
              "name": "the run's name (default: '<experiment> <overrides>')",
              "group": "the W&B group (default: the sweep's name in a multirun, else none)",
              "overrides": "the overrides typed (default: from Hydra, without hydra.*, paths.*, ...)"}


def _unique(items) -> List[str]:
    return list(dict.fromkeys(str(i) for i in items if i not in (None, "")))


def _key(override: str) -> str:
    return override.lstrip("+~").split("=", 1)[0]


def typed_overrides(overrides) -> List[str]:
    """The overrides that change what is trained, as typed (without the ``++`` attnflow-train
    adds): no hydra.*, paths.*, experiment=, logger choices or fields, ...."""
    out = []
    for item in overrides or ():
        key = _key(item)
        if any(key == n or key.startswith((n + ".", n + "/")) for n in NOISE):
            continue
        out.append(item.lstrip("+"))
    return out


def _hydra_info(cfg: Any) -> Optional[dict]:
    """{choices, overrides, multirun, sweep_dir} from the running Hydra app, or from the ``hydra``
    node of a config composed with ``return_hydra_config``; None outside Hydra."""
    from hydra.core.hydra_config import HydraConfig

    if HydraConfig.initialized():
        hc = HydraConfig.get()
    elif hasattr(cfg, "get") and cfg.get("hydra") is not None:
        hc = cfg["hydra"]
    else:
        return None
    mode = hc.get("mode")
    return {"choices": dict(hc.runtime.choices), "overrides": list(hc.overrides.task),
            "multirun": getattr(mode, "name", mode) == "MULTIRUN", "sweep_dir": hc.sweep.dir}


def _swept_experiments(sweep_dir: Any) -> Optional[str]:
    """``a,b`` when the sweep (its ``multirun.yaml``, written before the first job) sweeps
    ``experiment=a,b``: the group's label then, so the jobs of one sweep share one group."""
    import yaml

    try:
        typed = yaml.safe_load((Path(str(sweep_dir)) / "multirun.yaml").read_text())["hydra"]["overrides"]["task"]
    except (OSError, yaml.YAMLError, KeyError, TypeError):
        return None
    swept = [o.split("=", 1)[1] for o in typed or () if isinstance(o, str)
             and _key(o) == "experiment" and "," in o]
    return swept[0] if swept else None


def sweep_group(label: str, sweep_dir: str) -> str:
    """A multirun's W&B group: its label (search config or experiment) and the sweep folder's
    last two parts, e.g. 'default 2025-01-31/12-00-00-123456' (a fixed folder named like the
    label, 'multirun/gat_cora_optuna', gives just the label, so a continued study stays one group)."""
    parts = [p for p in Path(str(sweep_dir)).parts[-2:] if p not in ("multirun", label)]
    return " ".join([label, "/".join(parts)]).strip()


def _check_identity(run: Any, tags: Any) -> None:
    if run is not None and not isinstance(run, Mapping):
        raise ConfigError(f"'run' must be a mapping with the fields {', '.join(RUN_FIELDS)}, got {run!r}")
    for key, value in (run or {}).items():
        if key not in RUN_FIELDS:
            raise ConfigError(f"run has no field '{key}' (at 'run.{key}'); fields: "
                              + "; ".join(f"{k}: {v}" for k, v in RUN_FIELDS.items())
                              + f".{suggest(str(key), RUN_FIELDS)}")
        if key == "overrides":
            ok = value is None or (isinstance(value, list) and all(isinstance(v, str) for v in value))
        else:
            ok = value is None or isinstance(value, str)
        if not ok:
            kind = "a list of strings" if key == "overrides" else "a string"
            raise ConfigError(f"run.{key} (at 'run.{key}') must be {kind} or null, got {value!r}")
    if not isinstance(tags, list) or not all(isinstance(t, (str, int, float)) for t in tags):
        raise ConfigError(f"tags (at 'tags') must be a list of strings, e.g. tags=[baseline,cpu], "
                          f"got {tags!r}")


def wandb_env_tags() -> List[str]:
    """The tags of ``$WANDB_TAGS`` (W&B's own variable: a comma-separated list), checked as W&B
    checks tags: attnflow passes its tags to ``wandb.init``, which would outrank the variable, so
    they join the run's ``tags`` where a W&B logger is chosen."""
    tags = [t.strip() for t in os.environ.get("WANDB_TAGS", "").split(",") if t.strip()]
    _check_wandb_tags(tags, f"$WANDB_TAGS={os.environ.get('WANDB_TAGS')!r}")
    return tags


def run_identity(cfg: Any, resolved: Dict[str, Any]) -> Dict[str, Any]:
    """``{"run": {experiment, name, group, overrides}, "tags": [...]}`` for the resolved config.

    ``run.*`` fields already set (by the user, or in a saved config being resumed) are kept; with a
    W&B logger, W&B's own variables ``$WANDB_NAME``, ``$WANDB_RUN_GROUP`` and ``$WANDB_TAGS`` come
    next (the values attnflow passes to ``wandb.init`` would outrank them, unseen); the
    others come from Hydra (the composed ``cfg``'s choices and typed overrides). Outside Hydra
    (``train(cfg, dir)`` from Python) the experiment is unknown (null) and the name is
    "<model> on <data>". Raises :class:`ConfigError` for unknown ``run`` fields or bad ``tags``."""
    run, tags = resolved.get("run"), resolved.get("tags", [])
    tags = [] if tags is None else tags
    _check_identity(run, tags)
    run = {k: (run or {}).get(k) for k in RUN_FIELDS}
    chosen = resolved.get("logger") if isinstance(resolved.get("logger"), Mapping) else {}
    if "wandb" in chosen:  # the W&B run is tagged with them
        _check_wandb_tags(tags, "tags (at 'tags')")
        tags = _unique([*tags, *wandb_env_tags()])
    wandb = chosen.get("wandb") or {}
    for field, key in (("group", "group"), ("run_name", "name")):  # W&B's own field wins: recorded
        if wandb.get(field) is not None:                           # as the run's, so the two agree
            if run[key] is not None and run[key] != wandb[field]:
                raise ConfigError(f"logger.wandb.{field}={wandb[field]} and run.{key}={run[key]} name "
                                  f"two {key}s for one run; set one (run.{key} names it for every logger)")
            run[key] = wandb[field]
    if "wandb" in chosen:  # W&B's own variables, which the name and group attnflow passes to
        for key, var in (("name", "WANDB_NAME"), ("group", "WANDB_RUN_GROUP")):  # wandb.init
            if run[key] is None and os.environ.get(var):                          # would outrank
                run[key] = os.environ[var]
    info = _hydra_info(cfg)
    if info is not None:
        if run["experiment"] is None:
            run["experiment"] = info["choices"].get("experiment") or "default"
        if run["overrides"] is None:
            run["overrides"] = typed_overrides(info["overrides"])
        if run["group"] is None and info["multirun"]:
            label = (info["choices"].get("hparams_search") or _swept_experiments(info["sweep_dir"])
                     or run["experiment"])
            run["group"] = sweep_group(label, info["sweep_dir"])
    if run["name"] is None:
        if run["experiment"] is not None:
            run["name"] = " ".join([run["experiment"], *(run["overrides"] or [])])
        else:
            names = [(resolved.get(k) or {}).get("name", "?") for k in ("model", "data")]
            run["name"] = f"{names[0]} on {names[1]}"
    return {"run": run, "tags": [str(t) for t in tags]}


def logger_identity(resolved: Dict[str, Any]) -> Dict[str, Any]:
    """What loggers need of the identity: name, group and tags (config tags + experiment)."""
    run = resolved.get("run") or {}
    return {"name": run.get("name"), "group": run.get("group"),
            "tags": _unique([*(resolved.get("tags") or []), run.get("experiment")])}
