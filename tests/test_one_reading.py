"""attnflow-train reads the command line once, as Hydra does: it adds no composition of the config
to those a plain ``@hydra.main`` app of the same config makes (2 for a run; a sweep's master
config twice and each job's config as Hydra's sweeper checks it and as its launcher runs it), and
its checks see those compositions (:mod:`attnflow.config.hydra_internals`)."""

from __future__ import annotations

import hydra
import pytest
from hydra._internal.config_loader_impl import ConfigLoaderImpl

from attnflow.config.groups import field_overrides
from support import CONF, train_cli

TINY = ["trainer.max_steps=1", "trainer.limit_val_batches=1", "trainer.limit_test_batches=1",
        "logger=none", "data.train_size=16", "data.val_size=8", "data.test_size=8"]


@pytest.fixture
def compositions(monkeypatch):
    """The configs Hydra's loader composes, as (run mode, the overrides), in order."""
    made = []
    load = ConfigLoaderImpl.load_configuration

    def counted(self, config_name, overrides, run_mode, *args, **kwargs):
        made.append((run_mode.name, tuple(overrides)))
        return load(self, config_name, overrides, run_mode, *args, **kwargs)

    monkeypatch.setattr(ConfigLoaderImpl, "load_configuration", counted)
    return made


def _plain_app() -> None:
    """A plain ``@hydra.main`` app of attnflow's config that trains nothing."""
    hydra.main(version_base="1.3", config_path=str(CONF), config_name="train")(lambda cfg: None)()


@pytest.mark.slow
@pytest.mark.parametrize("sweep", [[], ["-m", "seed=1,2"]], ids=["run", "sweep"])
def test_attnflow_train_composes_as_a_plain_hydra_app(tmp_path, monkeypatch, compositions, sweep):
    monkeypatch.setenv("ATTNFLOW_OUTPUT_DIR", str(tmp_path / "outputs"))
    monkeypatch.chdir(tmp_path)
    argv = [*sweep, *TINY]
    assert train_cli(monkeypatch, *field_overrides(argv, CONF), main=_plain_app) == 0  # (as typed
    plain, compositions[:] = compositions[:], []  # by attnflow-train: fields left at defaults)
    assert train_cli(monkeypatch, *argv) == 0
    assert compositions == plain
    assert len(plain) == (2 if not sweep else 2 + 2 * 2)  # (Hydra's own counts, as documented)
    runs = list((tmp_path / "outputs").rglob("metrics.json"))
    assert len(runs) == (1 if not sweep else 2)


def test_one_module_reads_overrides_by_hydras_grammar():
    package = CONF.parent / "attnflow"
    readers = [p.relative_to(package).as_posix() for p in sorted(package.rglob("*.py"))
               if "overrides_parser" in p.read_text(encoding="utf-8")]
    assert readers == ["config/overrides.py"]
