"""Sweepers and launchers as the command line picks them (docs/sweeps.md), importing neither torch
nor :mod:`attnflow.training`: :func:`missing_plugin` names a sweeper or launcher that is not
installed, with the extra that installs it, from the config files' text alone;
:func:`foreign_hydra_plugins` the other Hydra plugins installed (whose groups ``--help`` cannot see).
"""

from __future__ import annotations

import importlib.util
import pkgutil
import re
from pathlib import Path
from typing import Any, Iterable, List, Optional, Tuple

import yaml  # (PyYAML, which OmegaConf imports)

OPTUNA_SWEEPER = "hydra_plugins.attnflow_optuna_sweeper.optuna_sweeper.OptunaSweeper"  # attnflow's own
# hydra-optuna-sweeper's name, which runs attnflow's sweeper too (hydra_plugins/hydra_optuna_sweeper)
PLUGIN_OPTUNA_SWEEPER = "hydra_plugins.hydra_optuna_sweeper.optuna_sweeper.OptunaSweeper"
PLUGIN_GROUPS = ("hydra/sweeper", "hydra/launcher")
RETRY_OF = "retry_of"  # a trial's user attribute: the number of the interrupted trial it takes up
RUN_DIR = "run_dir"  # a trial's user attribute: its run folder

# plugin → (modules it needs, the pip extra that installs them, what it is)
PLUGINS = {
    "optuna": (("optuna", "hydra_plugins.attnflow_optuna_sweeper", "hydra_plugins.hydra_optuna_sweeper"),
               "sweep", "the Optuna sweeper"),
    "joblib": (("joblib", "hydra_plugins.hydra_joblib_launcher"), "launchers", "the joblib launcher"),
    "submitit": (("submitit", "hydra_plugins.hydra_submitit_launcher"), "launchers",
                 "the submitit launcher"),
}


def _defaults(path: Path) -> list:
    """The defaults list of a config file ([] when it has none or cannot be read)."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return []
    return list(data.get("defaults") or []) if isinstance(data, dict) else []


def _plugin_of(group: str, option: str, conf_dir: Path, seen: set) -> Optional[str]:
    """The plugin behind ``hydra/sweeper=option`` or ``hydra/launcher=option``, or None."""
    if group == "hydra/sweeper":
        return "optuna" if option == "optuna" else None
    if option == "joblib":
        return "joblib"
    if option.startswith("submitit"):
        return "submitit"
    path = conf_dir / group / f"{option}.yaml"
    if path in seen:
        return None
    seen.add(path)  # `- joblib` in its defaults: our file extends the plugin's config
    found = (_plugin_of(group, e, conf_dir, seen) for e in _defaults(path) if isinstance(e, str))
    return next(filter(None, found), None)


def _choices(argv: Iterable[str], conf_dir: Path) -> Iterable[Tuple[str, str, str]]:
    """(group, option, the argument) for each group choice on the command line."""
    for arg in argv:
        key, eq, value = arg.lstrip("+").partition("=")
        if not eq or arg.startswith(("++", "~", "-")):
            continue
        if "/" in key or ("." not in key and (conf_dir / key).is_dir()):
            for option in value.split(","):  # a multirun over options: each of them
                yield key, option.strip(), arg


def required_plugins(argv: Iterable[str], conf_dir: Path) -> Iterable[Tuple[str, str]]:
    """(plugin, the argument that needs it) for the sweepers and launchers the command line picks,
    directly or through a config's defaults list (``hparams_search=gat_cora_optuna``)."""
    for group, option, arg in _choices(argv, conf_dir):
        picks = [(group, option)] if group in PLUGIN_GROUPS else [
            (re.sub(r"^override\s+/?", "", str(key)), sub)
            for entry in _defaults(conf_dir / group / f"{option}.yaml") if isinstance(entry, dict)
            for key, sub in entry.items()]
        seen: set = set()
        for sub_group, sub_option in picks:
            if sub_group in PLUGIN_GROUPS and isinstance(sub_option, str):
                plugin = _plugin_of(sub_group, sub_option, conf_dir, seen)
                if plugin:
                    yield plugin, arg


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def missing_module(plugin: str) -> Optional[str]:
    """The first module ``plugin`` needs that is not installed, else None."""
    return next((m for m in PLUGINS[plugin][0] if not _importable(m)), None)


def missing_plugin(argv: Iterable[str], conf_dir: Path) -> Optional[str]:
    """One line naming the first plugin the command line needs that is not installed, else None."""
    for plugin, arg in required_plugins(argv, conf_dir):
        module = missing_module(plugin)
        if module:
            _, extra, what = PLUGINS[plugin]
            return (f"{arg} needs {what}, which is not installed (no module '{module}'): "
                    f'pip install -e ".[{extra}]" in a checkout, or pip install "attnflow[{extra}]"')
    return None


def is_optuna_sweeper(target: Any) -> bool:
    """Whether a sweeper's ``_target_`` runs attnflow's Optuna sweeper: its own name, or
    hydra-optuna-sweeper's (a search saved for that plugin)."""
    return target in (OPTUNA_SWEEPER, PLUGIN_OPTUNA_SWEEPER)


def optuna_sweep(cfg: Any) -> bool:
    """Whether a composed config (with its ``hydra`` node) sweeps with attnflow's Optuna sweeper."""
    return is_optuna_sweeper(cfg.hydra.sweeper.get("_target_"))


def foreign_hydra_plugins() -> List[str]:
    """The installed ``hydra_plugins`` modules other than those of ``PLUGINS`` (none imported)."""
    spec = importlib.util.find_spec("hydra_plugins")
    ours = {m.rsplit(".", 1)[1] for modules, _, _ in PLUGINS.values() for m in modules
            if m.startswith("hydra_plugins.")}
    return [m.name for m in pkgutil.iter_modules(spec.submodule_search_locations or [])
            if m.name not in ours] if spec else []
