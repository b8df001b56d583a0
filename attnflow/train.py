"""``attnflow-train``: the Hydra app that trains one experiment (``python -m attnflow.train``).

    attnflow-train                          # the default: reverse sequences, BiGRU + Bahdanau
    attnflow-train scorer=dot               # swap the attention scorer
    attnflow-train experiment=reverse_multihead logger=wandb

Config errors (unknown block names, bad fields) print one message and exit with status 2.
"""

from __future__ import annotations

import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from attnflow import config_dir
from attnflow.registry import ConfigError

CONF_DIR = str(config_dir())  # the checkout's conf/, or the one installed with the package


@hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="train")
def run_app(cfg: DictConfig) -> float | None:
    from attnflow.callbacks import NonFiniteLossError
    from attnflow.run import train

    try:
        summary = train(cfg, Path(HydraConfig.get().runtime.output_dir))
    except ConfigError as err:
        print(f"attnflow: config error: {err}", file=sys.stderr)
        sys.exit(2)
    except NonFiniteLossError as err:
        print(f"attnflow: {err}", file=sys.stderr)
        sys.exit(1)
    metric = cfg.get("optimized_metric")
    if metric:  # what a sweeper optimises; a missing or misspelt name is an error, not None
        if metric not in summary["metrics"]:
            print(f"attnflow: optimized_metric '{metric}' was not logged; logged: "
                  f"{', '.join(sorted(summary['metrics']))}", file=sys.stderr)
            sys.exit(2)
        return summary["metrics"][metric]
    return None


def main() -> None:
    """The console script: plain field overrides may name fields the YAML leaves at their
    constructor defaults (:func:`attnflow.groups.field_overrides`), then Hydra runs the app."""
    from attnflow.groups import field_overrides

    sys.argv[1:] = field_overrides(sys.argv[1:], Path(CONF_DIR))
    run_app()


if __name__ == "__main__":
    main()
