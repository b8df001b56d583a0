"""Hydra's internals that attnflow reads, in one place, checked against hydra-core 1.3.8;
``tests/test_library_internals.py`` checks each on the installed version:

- ``hydra._internal.hydra.ConfigLoaderImpl``: the config loader ``hydra.main`` builds its
  ``Hydra`` with. :func:`checked_compositions` has ``hydra.main`` build a
  :class:`CheckedConfigLoader` instead, so that attnflow checks each config Hydra composes
  (Hydra's own parse of the command line, search path and loader) before Hydra acts on it:
  configures logging, builds callbacks, makes folders or runs a job. Hydra 1.3 has no public
  hook there (its ``Callback`` has none before ``on_run_start``, and is built from the config).
- ``hydra._internal.config_loader_impl.get_overrides_dirname``: how Hydra names a job's
  ``hydra.job.override_dirname`` from its overrides, made again of the overrides as typed.
- ``hydra._internal.core_plugins``: the module of Hydra's own launcher and sweeper, as Hydra's
  configs name them in ``_target_``.
"""

from __future__ import annotations

import contextlib
import functools
from typing import Any, Callable, Dict, Iterator, List, Optional

from hydra._internal import hydra as hydra_module
from hydra._internal.config_loader_impl import ConfigLoaderImpl, get_overrides_dirname
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from attnflow.config.overrides import parse

CORE_PLUGINS = "hydra._internal.core_plugins."
BASIC_LAUNCHER = CORE_PLUGINS + "basic_launcher.BasicLauncher"  # hydra/launcher=basic


class CheckedConfigLoader(ConfigLoaderImpl):
    """Hydra's config loader that calls ``check(cfg, first)`` on every config it composes
    (``first``: ``hydra.main``'s first composition, made only to learn the mode; later ones are
    the run's or each sweep job's). Hydra composes with ``complete(overrides)`` where given
    (``++trainer.max_epochs=2`` for ``trainer.max_epochs=2``), and the config records the
    overrides as typed, so that launchers print and ``.hydra/overrides.yaml`` keeps the user's.
    Both are module-level functions: the loader travels pickled to a launcher's process."""

    def __init__(self, config_search_path: Any, check: Callable[[DictConfig, bool], None],
                 complete: Optional[Callable[[List[str]], List[str]]] = None) -> None:
        super().__init__(config_search_path=config_search_path)
        self.check, self.complete, self.compositions = check, complete, 0

    def load_configuration(self, config_name: Optional[str], overrides: List[str], run_mode: RunMode,
                           from_shell: bool = True, validate_sweep_overrides: bool = True) -> DictConfig:
        typed = list(overrides)
        given = self.complete(typed) if self.complete is not None else typed
        cfg = super().load_configuration(config_name=config_name, overrides=given, run_mode=run_mode,
                                         from_shell=from_shell,
                                         validate_sweep_overrides=validate_sweep_overrides)
        if given != typed:
            record_as_typed(cfg, dict(zip(given, typed)))
        self.compositions += 1
        self.check(cfg, self.compositions == 1)
        return cfg


def record_as_typed(cfg: DictConfig, typed: Dict[str, str]) -> None:
    """``cfg``'s record of its task overrides with each completed one (a key of ``typed``) as
    it was typed, and ``hydra.job.override_dirname`` made of those (as Hydra makes it)."""
    recorded = OmegaConf.to_container(cfg.hydra.overrides.task, resolve=False)  # (${oc.env:…} kept)
    task = [typed.get(str(o), str(o)) for o in recorded]
    cfg.hydra.overrides.task = task
    job = cfg.hydra.job
    naming = job.config.override_dirname
    job.override_dirname = get_overrides_dirname(
        overrides=[parse(o) for o in task], exclude_keys=list(naming.exclude_keys),
        item_sep=naming.item_sep, kv_sep=naming.kv_sep)


@contextlib.contextmanager
def checked_compositions(check: Callable[[DictConfig, bool], None],
                         complete: Optional[Callable[[List[str]], List[str]]] = None) -> Iterator[None]:
    """Within: the ``Hydra`` that ``hydra.main`` creates loads with a :class:`CheckedConfigLoader`
    of ``check`` and ``complete``."""
    original = hydra_module.ConfigLoaderImpl
    hydra_module.ConfigLoaderImpl = functools.partial(CheckedConfigLoader, check=check, complete=complete)
    try:
        yield
    finally:
        hydra_module.ConfigLoaderImpl = original
