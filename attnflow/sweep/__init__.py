"""Optuna searches run by attnflow's own Hydra sweeper (``hydra/sweeper=optuna``, docs/sweeps.md):
the search space from Hydra's override syntax (:mod:`.space`), the study in its storage
(:mod:`.study`), and the loop that asks, launches and tells trials (:mod:`.sweeper`). Nothing here
imports torch or the training code; a trial's pruning callback (``attnflow.training.pruning``)
reaches the study through :mod:`.study`."""
