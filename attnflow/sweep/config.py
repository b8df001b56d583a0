"""``hydra/sweeper=optuna``: the fields of attnflow's Optuna sweeper (Hydra checks their types as it
composes). The sampler and pruner are groups of their own: ``hydra/sweeper/sampler=tpe|random|cmaes|
grid|nsgaii`` and ``hydra/sweeper/pruner=none|median|hyperband`` (conf/hydra/sweeper/)."""

from __future__ import annotations

import enum
import inspect
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from omegaconf import OmegaConf

from attnflow.io.console import warn_unread
from attnflow.sweep.plugins import OPTUNA_SWEEPER as TARGET


@dataclass
class OptunaSweeperConf:
    _target_: str = TARGET
    _recursive_: bool = False  # the sweeper builds its sampler (seed, grid) and pruner itself
    defaults: List[Any] = field(default_factory=lambda: ["_self_", {"sampler": "tpe"}, {"pruner": "none"}])
    sampler: Any = None
    pruner: Any = None
    # null: each optimized_metric's better end; else minimize or maximize (a list: one each)
    direction: Any = None
    # null: <sweep dir>/optuna.db; a path ending in .journal: a journal file; else an SQLAlchemy URL
    storage: Optional[str] = None
    study_name: Optional[str] = None  # null: the hparams_search name
    n_trials: int = 20  # the study's trials, finished or running, when the sweep ends
    n_jobs: int = 1  # trials at once
    params: Optional[Dict[str, Any]] = None  # key: interval(…) | range(…) | choice(…) | a value
    # failed over finished trials of the study above which the sweep ends (1.0: never)
    max_failure_rate: float = 1.0
    # a live trial's heartbeat (seconds); one silent for grace_period is a dead worker's: retried
    heartbeat_interval: int = 60
    grace_period: int = 180
    # hydra-optuna-sweeper's keys that attnflow's sweeper takes no more: refused in one line
    search_space: Optional[Dict[str, Any]] = None  # (use params)
    custom_search_space: Optional[str] = None  # (use params: no function runs)


def directions(direction: Any) -> List[str]:
    """``hydra.sweeper.direction`` as a list of ``minimize``/``maximize``, one per objective."""
    items = list(direction) if OmegaConf.is_list(direction) or isinstance(direction, (list, tuple)) \
        else [direction]
    return [str(d.name if isinstance(d, enum.Enum) else d).lower() for d in items]


def build(node: Any, where: Optional[str], **fields: Any) -> Any:
    """The Optuna sampler or pruner of config ``node`` with ``fields`` added; a field its class
    does not take (a saved search's ``n_startup_trials`` after ``hydra/sweeper/sampler=random``)
    is left out, with one warning line naming it at ``where`` (None: said elsewhere)."""
    from hydra.utils import get_class, instantiate  # (here: attnflow-train --help loads no Hydra)

    params = inspect.signature(get_class(node["_target_"])).parameters
    takes_any = any(p.kind is p.VAR_KEYWORD for p in params.values())
    kept = {k: v for k, v in {**node, **fields}.items() if k.startswith("_") or k in params or takes_any}
    for key in sorted(set(node) - set(kept)) if where else ():
        warn_unread(f"{where}.{key}", f"{node['_target_'].rsplit('.', 1)[-1]} takes no {key}")
    return instantiate({**kept}) if kept else None
