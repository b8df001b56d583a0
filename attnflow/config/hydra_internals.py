"""Hydra's internals that attnflow reads, in one place, checked against hydra-core 1.3.8;
``tests/test_library_internals.py`` checks each on the installed version:

- ``hydra._internal.hydra.ConfigLoaderImpl``: the config loader ``hydra.main`` builds its
  ``Hydra`` with. :func:`checked_compositions` has ``hydra.main`` build a
  :class:`CheckedConfigLoader` instead, so that attnflow checks each config Hydra composes
  (Hydra's own parse of the command line, search path and loader) before Hydra acts on it:
  configures logging, builds callbacks, makes folders or runs a job. Hydra 1.3 has no public
  hook there (its ``Callback`` has none before ``on_run_start``, and is built from the config).
- ``hydra._internal.core_plugins``: the module of Hydra's own launcher and sweeper, as Hydra's
  configs name them in ``_target_``.
"""

from __future__ import annotations

import contextlib
import functools
from typing import Any, Callable, Iterator

from hydra._internal import hydra as hydra_module
from hydra._internal.config_loader_impl import ConfigLoaderImpl
from omegaconf import DictConfig

CORE_PLUGINS = "hydra._internal.core_plugins."
BASIC_LAUNCHER = CORE_PLUGINS + "basic_launcher.BasicLauncher"  # hydra/launcher=basic


class CheckedConfigLoader(ConfigLoaderImpl):
    """Hydra's config loader that calls ``check(cfg, first)`` on every config it composes, as it
    composes it: ``first`` is its first composition of the command line (``hydra.main`` composes
    it once to learn the mode, with no logging, callbacks or sweeps), later ones are the run's or
    each job's of a sweep. ``check`` is a module-level function: the loader travels pickled to a
    launcher's or a trial's process, and checks there too."""

    def __init__(self, config_search_path: Any, check: Callable[[DictConfig, bool], None]) -> None:
        super().__init__(config_search_path=config_search_path)
        self.check, self.compositions = check, 0

    def load_configuration(self, *args: Any, **kwargs: Any) -> DictConfig:
        cfg = super().load_configuration(*args, **kwargs)
        self.compositions += 1
        self.check(cfg, self.compositions == 1)
        return cfg


@contextlib.contextmanager
def checked_compositions(check: Callable[[DictConfig, bool], None]) -> Iterator[None]:
    """Within: the ``Hydra`` that ``hydra.main`` creates loads with a :class:`CheckedConfigLoader`
    of ``check``."""
    original = hydra_module.ConfigLoaderImpl
    hydra_module.ConfigLoaderImpl = functools.partial(CheckedConfigLoader, check=check)
    try:
        yield
    finally:
        hydra_module.ConfigLoaderImpl = original
