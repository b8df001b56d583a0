"""hydra-optuna-sweeper's module path, shipped by attnflow so that a search saved for that plugin
runs attnflow's sweeper (:mod:`.optuna_sweeper`). It is not the plugin, which needs Optuna < 3
where attnflow's ``sweep`` extra needs Optuna >= 4: install one or the other."""
