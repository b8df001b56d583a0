"""``attnflow-train``: trains one experiment (``python -m attnflow.cli.train``).

    attnflow-train                          # the default: reverse sequences, BiGRU + Bahdanau
    attnflow-train scorer=dot               # swap the attention scorer
    attnflow-train experiment=reverse_multihead logger=wandb

Config errors print one message and exit with status 2; a signal (SIGINT, SIGTERM, SIGUSR1) with
``128 + signal`` (:mod:`attnflow.training.preemption`); a write the disk refuses mid-run with 1
and one line (:mod:`attnflow.training.rollback`). ``--help`` (:mod:`attnflow.cli.help`) reads the
config files alone; the Hydra app is :mod:`attnflow.cli.train_app`, imported after it.
"""

from __future__ import annotations

import sys
from pathlib import Path

from attnflow import config_dir
from attnflow.cli.help import train_help
from attnflow.training.onednn import bound_primitive_cache


def main() -> None:
    """The console script: ``--help``, or the overrides checked, completed and run by Hydra."""
    bound_primitive_cache()  # before any tensor work: oneDNN reads it once
    if {"-h", "--help"} & set(sys.argv[1:]):
        try:
            print(train_help(config_dir()))
        except BrokenPipeError:  # `attnflow-train --help | head`
            sys.stderr.close()
        return
    from attnflow.cli.train_app import launch  # (torch, Lightning and Hydra: not for --help)

    launch(sys.argv[1:])


if __name__ == "__main__":
    main()
