"""attnflow's Optuna sweeper as a Hydra plugin (Hydra finds sweepers in ``hydra_plugins``)."""
