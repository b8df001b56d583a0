"""Configs never run code. attnflow names blocks by registry name, so a config could name code only
through Hydra: a ``_target_`` (``hydra.utils.instantiate``), ``hydra.callbacks`` (called as Hydra
starts), a logging ``()`` factory or handler ``class``, or a group option that is a path to YAML
outside ``conf/``. :func:`code_refusal` refuses such a config; ``attnflow-train`` asks it of every
config Hydra composes, as Hydra composes it (by its own parser, search path and loader: any
``-cd``, ``-cp``, ``-cn`` or ``hydra.searchpath``; :mod:`attnflow.config.hydra_internals`), before
Hydra configures logging, builds callbacks or runs a job. Launchers and sweepers are limited to
Hydra's own and the plugins attnflow ships, Hydra callbacks to attnflow's own
(:data:`TRUSTED_TARGETS`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator, Optional, Tuple

from omegaconf import OmegaConf

from attnflow.config.hydra_internals import CORE_PLUGINS

TRUSTED_TARGETS = (CORE_PLUGINS, "hydra_plugins.hydra_joblib_launcher.",
                   "hydra_plugins.hydra_submitit_launcher.", "hydra_plugins.attnflow_optuna_sweeper.",
                   "hydra_plugins.hydra_optuna_sweeper.optuna_sweeper.OptunaSweeper",  # (attnflow's too)
                   "optuna.samplers.", "optuna.pruners.", "attnflow.cli.sweep_end.")
_LOGGING = ("hydra.job_logging", "hydra.hydra_logging")


def code_refusal(cfg: Any, conf_dir: Path) -> Optional[str]:
    """One line refusing the first piece of code a config composed by Hydra (with its ``hydra``
    node) names, else None."""
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
