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

from attnflow import config_dir
from attnflow.cli.help import train_help, unknown_override
from attnflow.io.console import plain_warnings
from attnflow.sweep.plugins import missing_plugin
from attnflow.training.onednn import bound_primitive_cache


def main() -> None:
    """The console script: ``--help``, or the overrides checked, completed and run by Hydra.
    What the command line alone shows wrong is refused before torch and Lightning load."""
    bound_primitive_cache()  # before any tensor work: oneDNN reads it once
    argv, conf = sys.argv[1:], config_dir()
    if {"-h", "--help"} & set(argv):
        try:
            print(train_help(conf))
        except BrokenPipeError:  # `attnflow-train --help | head`
            sys.stderr.close()
        return
    from attnflow.config.overrides import split_value  # (Hydra's grammar: not for --help)

    plain_warnings()  # attnflow's warnings as one line each
    missing = split_value(argv) or missing_plugin(argv, conf)  # before Hydra, whose messages
    unknown = None if missing else unknown_override(argv, conf)  # span a dozen lines
    if missing or unknown:
        print(f"attnflow: {missing or 'config error: ' + unknown}", file=sys.stderr)
        sys.exit(2)
    from attnflow.cli.train_app import launch  # (torch, Lightning and Hydra: not for these)

    launch(argv)


if __name__ == "__main__":
    main()
