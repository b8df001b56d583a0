"""Configs never run code. attnflow names blocks by registry name, so a config could name code only
through Hydra: a ``_target_`` (``hydra.utils.instantiate``), ``hydra.callbacks`` (called as Hydra
starts), a logging ``()`` factory or handler ``class``, or a group option that is a path to YAML
outside ``conf/``. Before Hydra starts, the config Hydra will load (by its own parser, search path
and loader: any ``-cd``, ``-cp``, ``-cn`` or ``hydra.searchpath``) is composed, once per option of
a swept group, and such a config refused; launchers and sweepers are limited to Hydra's own and
the plugins attnflow ships, Hydra callbacks to attnflow's own (:data:`TRUSTED_TARGETS`).
"""

from __future__ import annotations

import itertools
import os
from pathlib import Path
from typing import Any, Iterator, List, Optional, Sequence, Tuple

from hydra.errors import HydraException

from attnflow.config.hydra_internals import CORE_PLUGINS, caller_of, main_config, parse_command_line

TRUSTED_TARGETS = (CORE_PLUGINS, "hydra_plugins.hydra_joblib_launcher.",
                   "hydra_plugins.hydra_submitit_launcher.", "hydra_plugins.attnflow_optuna_sweeper.",
                   "hydra_plugins.hydra_optuna_sweeper.optuna_sweeper.OptunaSweeper",  # (attnflow's too)
                   "optuna.samplers.", "optuna.pruners.", "attnflow.cli.sweep_end.")
_LOGGING = ("hydra.job_logging", "hydra.hydra_logging")


def composed(argv: Sequence[str], conf_dir: Path, app: Any = None) -> Iterator[Any]:
    """The config ``hydra.main(config_path=conf_dir, config_name="train")(app)`` loads for
    ``argv``, with Hydra's node, once without sweeps and once per option of each swept group; none
    where Hydra cannot compose it (Hydra's own message follows). Hydra's own parser, search path
    and loader: ``--config-dir``, ``--config-path``, ``--config-name``, ``hydra.searchpath`` and
    search path plugins name what Hydra itself will load."""
    args = parse_command_line(argv)
    if args is None:
        return
    # (without app: attnflow-train's, the module -cp is relative to)
    caller = caller_of(app) if app else (None, "attnflow.cli.train")
    config_path = args.config_path if args.config_path is not None else str(conf_dir)
    if args.config_dir is not None and not os.path.isdir(os.path.abspath(args.config_dir)):
        return
    for overrides in _variants(args.overrides):
        try:
            cfg = main_config(caller, config_path, args.config_dir, args.config_name or "train",
                              overrides)
        except (HydraException, ValueError):
            return
        yield cfg


def code_refusal(cfg: Any, conf_dir: Path) -> Optional[str]:
    """One line refusing the first piece of code a :func:`composed` config names, else None."""
    from omegaconf import OmegaConf

    choices = OmegaConf.to_container(cfg.hydra.runtime.choices)
    for group, option in choices.items():
        if isinstance(option, str) and (option.startswith("/") or ".." in option.split("/")):
            return f"{group}={option}: a group option is a name in {conf_dir / group}, not a path"
    return _named_code(OmegaConf.to_container(cfg, resolve=False))


def _named_code(cfg: dict) -> Optional[str]:
    foreign = [name for name, entry in (cfg["hydra"].get("callbacks") or {}).items()
               if not (isinstance(entry, dict) and str(entry.get("_target_")).startswith(TRUSTED_TARGETS))]
    if foreign:
        return (f"hydra.callbacks ({', '.join(foreign)}) would run code as Hydra starts: attnflow "
                f"refuses them")
    for path, key, value in _walk(cfg):
        if key == "_target_" and not (path.startswith("hydra.") and str(value).startswith(TRUSTED_TARGETS)):
            return (f"{path}._target_={value}: a config names no code (blocks are named by registry "
                    f"name; launchers and sweepers are Hydra's or attnflow's plugins)")
        if path.startswith(_LOGGING) and (key == "()" or (key == "class" and not str(value).startswith("logging."))):
            return f"{path}.{key}={value}: the logging config names code; only logging's own classes"
    return None


def _walk(node: Any, path: str = "") -> Iterator[Tuple[str, str, Any]]:
    """(parent path, key, value) of every entry of a nested config."""
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, value in items:
        yield path, str(key), value
        yield from _walk(value, f"{path}.{key}" if path else str(key))


def _variants(overrides: List[str]) -> Iterator[List[str]]:
    """The overrides without sweeps, then with each option of each swept group (one at a time)."""
    from hydra.core.override_parser.types import ChoiceSweep

    from attnflow.config.overrides import parsed

    plain, swept = [], []
    for arg, override in parsed(overrides):
        if override is None or not override.is_sweep_override():
            plain.append(arg)
        elif "." not in override.key_or_group and isinstance(override.value(), ChoiceSweep):
            key = arg.split("=", 1)[0]
            swept.append([f"{key}={option}" for option in override.value().list])
    yield plain
    yield from ([*plain, choice] for choice in itertools.chain.from_iterable(swept))
