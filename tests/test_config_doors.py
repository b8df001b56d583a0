"""Every door to a config is checked: the trust check (:mod:`attnflow.config.trust`) sees each
config as Hydra composes it, by Hydra's own parser, search path and loader, so a config named by
``--config-dir``/``-cd``, ``--config-path``/``-cp``, ``--config-name``/``-cn`` or
``hydra.searchpath`` is refused (one line, exit status 2) before Hydra builds its callbacks and
logging: the code it names never runs and no run folder is written (a sweep's folder holds only
Hydra's ``multirun.yaml``: Hydra writes it before it composes the jobs' configs)."""

from __future__ import annotations

import shutil

import pytest

from support import CONF, train_cli

CALLBACK = "hydra:\n  callbacks:\n    evil:\n      _target_: os.makedirs\n      name: {marker}\n"


@pytest.fixture
def doors(tmp_path, monkeypatch):
    """A folder E: ``experiment/evil.yaml`` and primary configs ``evil.yaml`` (train's defaults)
    and ``train.yaml`` (conf/train.yaml's copy), each naming a callback that makes a folder."""
    e = tmp_path / "E"
    (e / "experiment").mkdir(parents=True)
    callback = CALLBACK.format(marker=tmp_path / "ran")
    (e / "experiment" / "evil.yaml").write_text("# @package _global_\n" + callback)
    (e / "evil.yaml").write_text("defaults:\n  - train\n  - _self_\n" + callback)
    shutil.copytree(CONF, e / "copy")
    (e / "copy" / "train.yaml").write_text((CONF / "train.yaml").read_text() + callback)
    monkeypatch.setenv("ATTNFLOW_OUTPUT_DIR", str(tmp_path / "outputs"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("argv", [
    ["--config-dir", "{E}", "experiment=evil"],
    ["-cd", "{E}", "experiment=evil"],
    ["--config-dir={E}", "experiment=evil"],
    ["-cd", "E", "experiment=evil"],  # (relative to the working folder, as Hydra takes it)
    ["--config-path", "{E}/copy", "-cn", "train"],
    ["-cp", "{E}/copy", "--config-name", "train"],
    ["-cp", "{E}/copy"],
    ["-cd", "{E}", "--config-name", "evil"],
    ["-cd", "{E}", "-cn", "evil"],
    ["hydra.searchpath=[file://{E}]", "experiment=evil"],
    ["-m", "-cd", "{E}", "experiment=reverse_multihead,evil"],
], ids=lambda argv: " ".join(argv))
def test_a_config_named_by_any_door_is_refused_before_its_code_runs(doors, monkeypatch, capsys, argv):
    argv = [a.replace("{E}", str(doors / "E")) for a in argv]
    assert train_cli(monkeypatch, *argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["attnflow: config error: hydra.callbacks (evil) would run code as Hydra starts: "
                   "attnflow refuses them"]
    assert not (doors / "ran").exists() and not (doors / "multirun").exists()
    written = {p.name for p in (doors / "outputs").rglob("*") if p.is_file()}
    assert written == ({"multirun.yaml"} if "-m" in argv else set())
