"""hydra-optuna-sweeper's keys under attnflow's sweeper (docs/sweeps.md, "Moving from
hydra-optuna-sweeper"), checked before Hydra starts by :func:`attnflow.sweep.checks.check_sweep`.

Each key of the plugin's ``OptunaSweeperConf`` is taken or refused in one line naming what to use:
``search_space`` (the plugin's deprecated dict) and ``custom_search_space`` (a function called
with each trial) are refused, as are the samplers Optuna 4 lost. The plugin's ``_target_`` runs
attnflow's sweeper (``hydra_plugins.hydra_optuna_sweeper``) with one warning line naming what the
search sets that reads differently here: ``n_trials``, ``max_failure_rate`` and ``range(…)`` in
``params`` (its end left out here, drawn by the plugin).
"""

from __future__ import annotations

import warnings
from dataclasses import fields
from typing import Any, Mapping, Optional

from hydra.errors import HydraException
from omegaconf import OmegaConf

from attnflow.config.overrides import parse
from attnflow.config.registry import ConfigError
from attnflow.io.console import AttnflowWarning
from attnflow.sweep.config import OptunaSweeperConf
from attnflow.sweep.plugins import PLUGIN_OPTUNA_SWEEPER
from attnflow.sweep.space import format_value

PARAMS = "use hydra.sweeper.params: key: interval(a,b)|choice(…)|range(…)"
GONE_SAMPLERS = {  # hydra-optuna-sweeper's samplers that Optuna 4 removed → what to use
    "optuna.samplers.MOTPESampler": "hydra/sweeper/sampler=tpe (TPE takes several objectives)",
}
DEFAULTS = {f.name: f.default for f in fields(OptunaSweeperConf)}


def check_migration(sweeper: Any) -> None:
    """Refuse the plugin's keys attnflow's sweeper does not take (a :class:`ConfigError`, one
    line); warn once where ``sweeper`` is named as the plugin's."""
    check_search_space(sweeper.get("search_space"))
    if sweeper.get("custom_search_space"):
        raise ConfigError(f"hydra.sweeper.custom_search_space={sweeper.custom_search_space}: "
                          f"attnflow's sweeper calls no function from config; use hydra.sweeper.params "
                          f"with choice(…)|interval(…)|range(…), and a conditional space as separate "
                          f"searches")
    rate = sweeper.get("max_failure_rate")
    if rate is not None and not 0 <= rate <= 1:
        raise ConfigError(f"hydra.sweeper.max_failure_rate={rate}: failed over finished trials of the "
                          f"study, between 0 and 1 (1: failures never end the sweep)")
    check_sampler(sweeper.get("sampler") or {})
    if sweeper.get("_target_") == PLUGIN_OPTUNA_SWEEPER:
        warnings.warn(plugin_note(sweeper), AttnflowWarning, stacklevel=2)


def check_sampler(sampler: Mapping) -> None:
    """A sampler Optuna 4 lost, or Optuna's grid sampler without its grid: one line each."""
    target = str(sampler.get("_target_", ""))
    if target in GONE_SAMPLERS:
        raise ConfigError(f"hydra.sweeper.sampler: {target} is gone from Optuna 4: use "
                          f"{GONE_SAMPLERS[target]}")
    if target == "optuna.samplers.GridSampler" and "search_space" not in sampler:
        raise ConfigError("hydra.sweeper.sampler: GridSampler takes its grid from hydra.sweeper.params "
                          "here: use hydra/sweeper/sampler=grid (in a search file: override "
                          "/hydra/sweeper/sampler: grid)")


def check_search_space(space: Any) -> None:
    """The plugin's deprecated ``search_space`` refused, each key translated where it can be."""
    if not space:
        return
    found = ", ".join(f"{key}: {translated(spec) or '?'}" for key, spec in space.items())
    raise ConfigError(f"hydra.sweeper.search_space (hydra-optuna-sweeper's old form) is not read here: "
                      f"{PARAMS}; yours: {found}")


def translated(spec: Any) -> Optional[str]:
    """A ``search_space`` entry (``{type: int|float|categorical, low, high, log, step, choices}``)
    as a ``params`` value drawing the same values; None where it is not one."""
    spec = OmegaConf.to_container(spec) if OmegaConf.is_config(spec) else spec
    if not isinstance(spec, dict):
        return None
    kind, low, high = str(spec.get("type", "")).lower(), spec.get("low"), spec.get("high")
    if kind == "categorical" and spec.get("choices"):
        return f"choice({', '.join(format_value(c) for c in spec['choices'])})"
    if kind not in ("int", "float") or low is None or high is None:
        return None
    step, tags = spec.get("step"), ["log"] if spec.get("log") else []
    if kind == "int":
        low, high, step = int(low), int(high), int(step or 1)
        if tags or step == 1:
            return f"tag({', '.join(tags + ['int'])}, interval({low}, {high}))"
        return f"range({low}, {high + 1}, {step})"  # (range leaves its end out)
    low, high = float(low), float(high)
    if step and not tags:  # its end, half a step on, left out
        return f"range({low!r}, {round(high + step / 2, 12)!r}, {float(step)!r})"
    interval = f"interval({low!r}, {high!r})"
    return f"tag(log, {interval})" if tags else interval


def plugin_note(sweeper: Any) -> str:
    """The warning for a sweeper named as hydra-optuna-sweeper's: attnflow's runs the search, and
    what the search sets that means something else here."""
    notes = ["hydra.sweeper._target_ is hydra-optuna-sweeper's OptunaSweeper: attnflow's Optuna "
             "sweeper (hydra/sweeper=optuna) runs this search"]
    if sweeper.get("n_trials") != DEFAULTS["n_trials"]:
        notes.append(f"n_trials={sweeper.n_trials} counts the study's trials (a continued study's "
                     f"finished ones too), the plugin's counted one command's")
    if sweeper.get("max_failure_rate") != DEFAULTS["max_failure_rate"]:
        notes.append(f"max_failure_rate={sweeper.max_failure_rate} is failed over finished trials of "
                     f"the study, checked after each trial")
    ranged = [key for key, value in (sweeper.get("params") or {}).items() if _is_range(key, value)]
    if ranged:
        notes.append(f"range(a, b) leaves b out here, the plugin drew b too ({', '.join(ranged)})")
    return "; ".join(notes)


def _is_range(key: str, value: Any) -> bool:
    """Whether ``params``' ``key: value`` is a ``range(…)`` (False for one the sweeper refuses)."""
    line = f"{key}={value if isinstance(value, str) else format_value(value)}"
    try:
        return parse(line).is_range_sweep()
    except HydraException:
        return False
