"""Why this module exists: lightning-hydra-template's search files, and others written for
hydra-optuna-sweeper, name ``_target_: hydra_plugins.hydra_optuna_sweeper.optuna_sweeper.OptunaSweeper``
under ``hydra: sweeper:``. Hydra builds a sweeper from a plugin class of that name, so this one,
attnflow's Optuna sweeper under the old name, runs those searches. It stores no config:
``hydra/sweeper=optuna`` is attnflow's (:mod:`attnflow.sweep.config`). ``attnflow-train`` says in one
warning line what reads differently here (:mod:`attnflow.sweep.migration`, docs/sweeps.md)."""

from hydra_plugins.attnflow_optuna_sweeper import optuna_sweeper as attnflow_sweeper


class OptunaSweeper(attnflow_sweeper.OptunaSweeper):
    """attnflow's Optuna sweeper, named as hydra-optuna-sweeper's."""
