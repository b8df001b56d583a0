"""``hydra/sweeper=optuna``: the Hydra face of :class:`attnflow.sweep.sweeper.OptunaSearch`. Hydra
imports this module whenever it scans its plugins, so Optuna and attnflow load only in a sweep."""

from __future__ import annotations

from typing import Any, List

from hydra.core.config_store import ConfigStore
from hydra.plugins.sweeper import Sweeper

from attnflow.sweep.config import OptunaSweeperConf

ConfigStore.instance().store(group="hydra/sweeper", name="optuna", node=OptunaSweeperConf,
                             provider="attnflow")


class OptunaSweeper(Sweeper):
    def __init__(self, **fields: Any) -> None:
        from attnflow.sweep.sweeper import OptunaSearch

        self.search = OptunaSearch(**fields)

    def setup(self, *, hydra_context: Any, task_function: Any, config: Any) -> None:
        self.search.setup(hydra_context=hydra_context, task_function=task_function, config=config)

    def sweep(self, arguments: List[str]) -> None:
        return self.search.sweep(arguments)
