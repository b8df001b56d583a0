"""Hydra's internals that attnflow reads, in one place, checked against hydra-core 1.3.8;
``tests/test_library_internals.py`` checks each on the installed version:

- ``hydra._internal.utils``: ``hydra.main``'s command-line parser, the calling module of a task
  function, and the search path ``hydra.main`` builds from it and ``--config-path``/
  ``--config-dir``; ``hydra._internal.hydra.Hydra``, the instance that composes with that search
  path. attnflow composes what ``hydra.main`` will load before Hydra starts
  (:mod:`attnflow.config.trust`); Hydra's public ``initialize_config_dir``/``_module`` take a
  folder or module, not ``hydra.main``'s command line. The composing itself is public
  (``hydra.compose``).
- ``hydra._internal.core_plugins``: the module of Hydra's own launcher and sweeper, as Hydra's
  configs name them in ``_target_``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
from typing import Any, List, Optional, Sequence, Tuple

from hydra import compose
from hydra._internal import utils
from hydra._internal.hydra import Hydra
from hydra.core.config_search_path import SearchPathQuery
from hydra.core.global_hydra import GlobalHydra

CORE_PLUGINS = "hydra._internal.core_plugins."
BASIC_LAUNCHER = CORE_PLUGINS + "basic_launcher.BasicLauncher"  # hydra/launcher=basic


def parse_command_line(argv: Sequence[str]) -> Optional[argparse.Namespace]:
    """``argv`` as ``hydra.main`` reads it (``overrides``, ``config_path``, ``config_name``,
    ``config_dir``, …), or None where it refuses it (Hydra's own run says why)."""
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            return utils.get_args_parser().parse_args(list(argv))
    except SystemExit:
        return None


def caller_of(task_function: Any) -> Tuple[Optional[str], Optional[str]]:
    """(file, module) of a ``hydra.main`` task function: where ``--config-path`` is relative to."""
    return utils.detect_calling_file_or_module_from_task_function(task_function)


def main_config(caller: Tuple[Optional[str], Optional[str]], config_path: str,
                config_dir: Optional[str], config_name: str, overrides: List[str]) -> Any:
    """The config, with Hydra's node, that ``hydra.main`` of a task function in ``caller``
    composes (as ``hydra._internal.utils._run_hydra``): the search path from ``config_path``,
    ``config_dir`` before it. Hydra's global state is left as it was. A ``HydraException`` or
    ``ValueError`` where Hydra cannot compose it."""
    global_hydra = GlobalHydra.instance()
    outer = global_hydra.hydra
    try:
        utils.validate_config_path(config_path)
        search_path = utils.create_automatic_config_search_path(*caller, config_path)
        if config_dir is not None:
            search_path.prepend("command-line", f"file://{os.path.abspath(config_dir)}",
                                SearchPathQuery(provider="schema"))
        global_hydra.clear()
        Hydra.create_main_hydra2(utils.detect_task_name(*caller), search_path)
        return compose(config_name, overrides, return_hydra_config=True)
    finally:
        global_hydra.hydra = outer
