"""A wheel install (pip install ., not -e) carries conf/ as attnflow/conf and trains from any folder."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _isolation_flag():
    """``--no-build-isolation`` when this environment can build the wheel itself (setuptools >= 68,
    with bdist_wheel: built in from 70.1, else the wheel package); otherwise pip fetches the build
    requirements from the package index (a fresh venv of Python 3.11 has setuptools 65)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        have = tuple(int(p) for p in version("setuptools").split(".")[:2])
    except (PackageNotFoundError, ValueError):
        return []
    ok = have >= (70, 1) or (have >= (68, 0) and importlib.util.find_spec("wheel") is not None)
    return ["--no-build-isolation"] if ok else []


def _run(cmd, cwd, **kw):
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, **kw)
    assert proc.returncode == 0, f"{' '.join(map(str, cmd))}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


@pytest.mark.slow
def test_wheel_install_trains_from_any_folder(tmp_path):
    # build from a copy: nothing (build/, *.egg-info) is written into the checkout
    src = tmp_path / "src"
    for folder in ("attnflow", "conf", "hydra_plugins"):
        shutil.copytree(ROOT / folder, src / folder, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(ROOT / name, src / name)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input"]
    _run(pip + ["wheel", "--no-deps", *_isolation_flag(), ".", "-w", str(tmp_path / "dist")], src, timeout=300)
    (wheel,) = (tmp_path / "dist").glob("attnflow-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = {f"attnflow/conf/{p.relative_to(ROOT / 'conf').as_posix()}" for p in (ROOT / "conf").rglob("*.yaml")}
    assert shipped and shipped <= names, sorted(shipped - names)
    assert "hydra_plugins/attnflow_optuna_sweeper/optuna_sweeper.py" in names  # where Hydra finds sweepers

    site = tmp_path / "site"
    _run(pip + ["install", "--no-deps", "--no-index", "--target", str(site), str(wheel)], tmp_path, timeout=300)
    shutil.rmtree(src)  # the installed copy must not need the source tree
    work = tmp_path / "elsewhere"
    work.mkdir()
    env = {**os.environ, "PYTHONPATH": str(site), "OMP_NUM_THREADS": "1"}
    env.pop("ATTNFLOW_DATA_DIR", None)
    run = tmp_path / "run"
    # one interpreter: where attnflow and its configs are found, then attnflow-train's main()
    script = ("import sys, attnflow; print(attnflow.__file__); print(attnflow.config_dir()); "
              "from hydra.core.plugins import Plugins; from hydra.plugins.sweeper import Sweeper; "
              "print([c.__module__ for c in Plugins.instance().discover(Sweeper)]); "
              "from attnflow.cli.train import main; sys.argv[1:] = " + repr(
                  ["trainer.fast_dev_run=true", "data.train_size=64", "data.val_size=16",
                   "data.test_size=16", "callbacks.progress_bar=none", "logger=none",
                   f"hydra.run.dir={run}"]) + "; main()")
    where = _run([sys.executable, "-c", script], work, env=env, timeout=300).stdout.splitlines()
    assert Path(where[0]).is_relative_to(site) and Path(where[1]) == site / "attnflow" / "conf", where
    assert "hydra_plugins.attnflow_optuna_sweeper.optuna_sweeper" in where[2]  # the installed sweeper
    assert "metrics" in json.loads((run / "metrics.json").read_text())
