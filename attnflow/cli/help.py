"""``attnflow-train --help``: the usage, and every config group with its choices, one line each,
read from the config files alone (no torch, Lightning or Hydra import); Hydra's is ``--hydra-help``.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import yaml  # PyYAML, which OmegaConf imports anyway

from attnflow.sweep.config import OptunaSweeperConf  # (dataclasses only)
from attnflow.sweep.plugins import PLUGINS, foreign_hydra_plugins, missing_module  # (cheap)

USAGE = """\
usage: {prog} [GROUP=OPTION ...] [KEY=VALUE ...]     train one run (outputs/<date>/<time>/)
       {prog} -m GROUP=A,B KEY=X,Y ...               a sweep: one job per combination (Hydra multirun)
       {prog} hparams_search=NAME [...]              a saved sweep: grid or Optuna (docs/sweeps.md)
       {prog} --cfg job [OVERRIDES]                  print the composed config, train nothing
       {prog} --hydra-help                           Hydra's own flags (--info, --shell-completion, …)

KEY=VALUE sets any field, also one the YAML leaves at its default (trainer.max_epochs=3,
task.optim.lr=0.01, attention.heads=8); `attnflow-blocks [KIND]` lists every block's fields."""

# Options Hydra plugins add to its groups: (the plugin of sweep.plugins.PLUGINS, or None; a line)
PLUGIN_OPTIONS = {
    "hydra/launcher": {
        "basic": (None, "one job after another in this process (Hydra's)"),
        "joblib": ("joblib", "jobs in parallel processes (hydra-joblib-launcher)"),
        "submitit_local": ("submitit", "jobs as local submitit processes"),
        "submitit_slurm": ("submitit", "jobs on SLURM (hydra-submitit-launcher)"),
    },
    "hydra/sweeper": {
        "basic": (None, "the grid of all combinations (Hydra's)"),
        "optuna": ("optuna", "Optuna (attnflow's sweeper): TPE, random, CMA-ES, grid, NSGA-II; pruning"),
    },
}


def describe(path: Path) -> str:
    """One line about a config file: its first comment line, else its first fields."""
    fields = []
    for line in path.read_text(encoding="utf-8").splitlines():
        text = line.strip()
        if text.startswith("# @package") or not text:
            continue
        if text.startswith("#"):
            if not fields:
                return text.lstrip("#").strip()
            continue
        if not line.startswith((" ", "-")) and not text.split("#", 1)[0].strip().endswith(":"):
            fields.append(text.split("#", 1)[0].strip())
    return "; ".join(fields[:3]) or "(empty)"


def root_choices(conf_dir: Path) -> Dict[str, str]:
    """{group: default option} of ``train.yaml``'s defaults list, in its order (an ``override
    hydra/…`` entry: that Hydra group's)."""
    entries = yaml.safe_load((conf_dir / "train.yaml").read_text(encoding="utf-8")).get("defaults", [])
    return {str(g).removeprefix("override "): "" if o is None else str(o) for entry in entries
            if isinstance(entry, dict) for g, o in entry.items() if g != "hydra"}


def _options(folder: Path) -> List[Tuple[str, str]]:
    return [(p.stem, describe(p)) for p in sorted(folder.glob("*.yaml"))]


def groups(conf_dir: Path) -> List[Tuple[str, str, List[Tuple[str, str]]]]:
    """(group, default option, [(option, description)]) for every group a user picks from."""
    defaults = root_choices(conf_dir)
    names = list(defaults) + sorted(p.name for p in conf_dir.iterdir()
                                    if p.is_dir() and p.name != "hydra" and p.name not in defaults
                                    and not p.name.startswith(("_", ".")))
    out = [(group, defaults.get(group, ""), _options(conf_dir / group)) for group in names]
    for group, plugins in PLUGIN_OPTIONS.items():
        options = [(option, text + (f' (not installed: pip install -e ".[{PLUGINS[plugin][1]}]")'
                                    if plugin and missing_module(plugin) else ""))
                   for option, (plugin, text) in plugins.items()]
        out.append((group, "basic", options + _options(conf_dir / group)))
    for entry in OptunaSweeperConf().defaults:  # the Optuna sweeper's own groups
        for name, default in (entry.items() if isinstance(entry, dict) else ()):
            group = f"hydra/sweeper/{name}"
            out.append((group + "   (with hydra/sweeper=optuna)", default, _options(conf_dir / group)))
    return out


def train_help(conf_dir: Path, prog: str = "attnflow-train", width: int = 0) -> str:
    """The ``--help`` page: usage lines, then each group with its options (``*`` the default)."""
    width = width or shutil.get_terminal_size((120, 24)).columns
    lines = [USAGE.format(prog=prog), "",
             f"Config groups (GROUP=OPTION; * the default; files in {conf_dir}):"]
    rows = groups(conf_dir)
    pad = max(len(o) for _, _, opts in rows for o, _ in opts) + 2
    for group, default, options in rows:
        lines.append(f"  {group}" + ("" if default else "   (default: none)"))
        for option, text in options:
            mark = "*" if option == default else " "
            line = f"    {mark} {option.ljust(pad)}{text}"
            lines.append(line if len(line) <= width else line[:max(width - 1, 20)] + "…")
    return "\n".join(lines)


def unknown_override(argv: List[str], conf_dir: Path) -> Optional[str]:
    """One line refusing the first override that names what the config tree lacks, else None: a
    ``GROUP=OPTION`` without its file (``scorer=dott``, also in a sweep or a list), with the
    options and the nearest, or an unknown top-level key (``trainr.max_epochs=3``). Hydra's own
    message spans a dozen lines. What this cannot see is left to Hydra: packages, ``glob(…)``,
    interpolations, Hydra's groups, and any run where a config folder may be added (the command
    line's search path, a foreign Hydra plugin)."""
    from hydra.core.override_parser.types import ChoiceSweep

    from attnflow.config.groups import top_level_keys, top_level_refusal
    from attnflow.config.overrides import parsed
    from attnflow.config.registry import suggest

    if any(a.startswith(("--config-dir", "-cd", "--config-path", "-cp", "hydra.searchpath",
                         "+hydra.searchpath")) for a in argv) or foreign_hydra_plugins():
        return None  # (an added folder's groups and options are not in conf_dir)
    known = {group: [o for o, _ in options] for group, _, options in groups(conf_dir)
             if not group.startswith("hydra/")}
    keys = top_level_keys(conf_dir)
    for arg, override in parsed(a for a in argv if not a.startswith("-") and "=" in a):
        if override is None:
            continue  # Hydra's own message about the syntax
        name = override.key_or_group
        if name.split(".")[0] not in keys | set(known) and "/" not in name:
            return top_level_refusal(name.split(".")[0], keys)
        if name not in known or override.is_delete() or override.package is not None:
            continue
        value = override.value()
        values = value.list if isinstance(value, ChoiceSweep) else value
        for option in values if isinstance(values, list) else [values]:
            if isinstance(option, str) and "/" not in option and "${" not in option \
                    and option not in known[name]:
                return (f"{name} has no option '{option}' (at '{arg}'); options: "
                        f"{', '.join(known[name])} (files in {conf_dir / name})."
                        f"{suggest(option, known[name])}")
    return None

