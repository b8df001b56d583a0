"""Shared test helpers: composing the Hydra config tree, the data root, small runs (imported as `support`)."""

from __future__ import annotations

import copy
import functools
import os
import re
from pathlib import Path
from typing import Callable, List, Optional

from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

import attnflow  # noqa: F401  (the ${attnflow_root:} resolver; registries find their blocks on lookup)
from attnflow.config.groups import field_overrides

ROOT = Path(__file__).resolve().parent.parent
CONF = ROOT / "conf"
DATA_DIR = Path(os.environ.get("ATTNFLOW_DATA_DIR", ROOT.parent / "shared" / "data"))

# Small and fast: a few steps, no progress bar or attention pictures, CSV logging only.
FAST = [
    "data.train_size=256", "data.val_size=64", "data.test_size=64", "data.batch_size=32",
    "trainer.accelerator=cpu", "trainer.max_epochs=1",
    "callbacks.progress_bar=none", "callbacks.attention_maps.examples=0",
]


def load_bench(name: str):
    """``bench/<name>.py`` as a module (bench/ is not a package; its scripts import each other by
    name, so bench/ is on ``sys.path`` while the module runs its imports)."""
    import importlib.util
    import sys

    sys.path.insert(0, str(ROOT / "bench"))
    try:
        spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(ROOT / "bench"))


def compose_cfg(overrides: List[str] = (), return_hydra_config: bool = False) -> DictConfig:
    """The config ``attnflow-train overrides`` composes (a copy: the tests may change it); with
    ``return_hydra_config`` composed afresh (Hydra's part records the working directory)."""
    if return_hydra_config:
        return _composed.__wrapped__(tuple(overrides), True)
    return copy.deepcopy(_composed(tuple(overrides), False))


@functools.lru_cache(maxsize=512)  # (the files of conf/ do not change during the tests)
def _composed(overrides: tuple, return_hydra_config: bool) -> DictConfig:
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        # as attnflow-train does: plain field overrides may name fields left at their defaults
        return compose("train", overrides=field_overrides(overrides, CONF),
                       return_hydra_config=return_hydra_config)


def train_cli(monkeypatch, *args: str, main: Optional[Callable[[], None]] = None) -> int:
    """``attnflow-train args`` through the console script's ``main()`` (or another ``main``
    reading ``sys.argv``) in this process (no fresh interpreter's imports to wait for): its exit
    status, 0 where ``main()`` returns. Afterwards
    Hydra's global state is cleared (so that the next test can compose again) and the logging
    handlers Hydra added for its jobs are closed and removed."""
    import logging
    import sys

    from hydra.core.global_hydra import GlobalHydra

    from attnflow.cli.train import main as train_main

    main = main or train_main
    monkeypatch.setattr(sys, "argv", ["attnflow-train", *args])
    handlers, level = logging.root.handlers[:], logging.root.level
    for name in ("pytorch_lightning", "lightning_fabric"):  # (the app quiets them)
        monkeypatch.setattr(logging.getLogger(name), "level", logging.getLogger(name).level)
    try:
        main()
    except SystemExit as exit_:
        return 0 if exit_.code is None else exit_.code
    finally:
        GlobalHydra.instance().clear()
        for handler in set(logging.root.handlers) - set(handlers):
            handler.close()
        logging.root.handlers[:], logging.root.level = handlers, level
    return 0


# Headless Chromium (Debian's package; .ci/run installs it) for the tests that render a page.
def fit_tiny(validate: bool = False, **trainer):
    """A Lightning ``Trainer`` (no logger, checkpoints, bar or summary; the CPU) with ``trainer``'s
    limits, after fitting a one-weight module on 2 batches an epoch: what Lightning itself does
    with a limit, e.g. ``fit_tiny(max_epochs=0).global_step``. ``validate``: the module has a
    validation step (logging ``val/loss``) and the fit 2 validation batches an epoch."""
    import pytorch_lightning as pl
    import torch

    class Tiny(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Linear(2, 1)

        def training_step(self, batch, _):
            return self.w(batch).pow(2).mean()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    class Validated(Tiny):
        def validation_step(self, batch, _):
            self.log("val/loss", self.w(batch).pow(2).mean())

    loader = lambda: torch.utils.data.DataLoader(torch.randn(4, 2), batch_size=2)  # noqa: E731
    fit = pl.Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False,
                     enable_model_summary=False, accelerator="cpu", **trainer)
    fit.fit(Validated() if validate else Tiny(), loader(), loader() if validate else None)
    return fit


CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_MISSING = ("needs Debian's chromium (/usr/bin/chromium; apt-get install chromium, as "
                    ".ci/run does)")


def chromium_flags(tmp_path: Path) -> List[str]:
    """The headless command line, offline and with a profile of its own under ``tmp_path``."""
    return [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
            "--no-first-run", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", f"--user-data-dir={tmp_path / 'profile'}"]


def chromium_dom(page: Path, probe: str, tmp_path: Path, *flags: str) -> str:
    """The DOM, as Chromium has it after loading, of a copy of ``page`` with ``probe`` (a
    ``<script>…</script></body>`` that writes what it measures into ``data-`` attributes of the
    body) in place of ``</body>``: the page itself stays without scripts. ``flags``: more of
    Chromium's (e.g. the ``--window-size`` of a screenshot, to measure the same layout)."""
    import subprocess

    probed = tmp_path / "probe.html"
    probed.write_text(page.read_text().replace("</body>", probe))
    dom = subprocess.run([*chromium_flags(tmp_path), "--virtual-time-budget=5000", *flags,
                          "--dump-dom", probed.as_uri()], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    return dom.stdout


def optuna_sweep_folder(folder: Path, values, storage: bool = True) -> Path:
    """A sweep folder as hydra-optuna-sweeper leaves it (multirun.yaml, job folders) with a study
    in ``optuna.db`` built through optuna's API: per job (task.optim.lr, model.cell, val/score)."""
    import json
    import warnings

    import pytest
    import yaml

    optuna = pytest.importorskip("optuna")
    from optuna.distributions import CategoricalDistribution, FloatDistribution

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    folder.mkdir()
    sweeper = {"_target_": "hydra_plugins.hydra_optuna_sweeper.optuna_sweeper.OptunaSweeper",
               "direction": "minimize", "study_name": "toy",
               "storage": "sqlite:///${hydra.sweep.dir}/optuna.db"}
    (folder / "multirun.yaml").write_text(yaml.safe_dump({"hydra": {"sweeper": sweeper}}))
    study = optuna.create_study(study_name="toy", direction="minimize",
                                storage=f"sqlite:///{folder / 'optuna.db'}") if storage else None
    for i, (lr, cell, value) in enumerate(values):
        job = folder / str(i)
        (job / ".hydra").mkdir(parents=True)
        (job / ".hydra" / "overrides.yaml").write_text(
            yaml.safe_dump([f"task.optim.lr={lr}", f"model.cell={cell}", "optimized_metric=val/score"]))
        (job / "config.yaml").write_text(yaml.safe_dump({"optimized_metric": "val/score"}))
        (job / "metrics.json").write_text(json.dumps({"metrics": {"val/score": value}, "epochs": 1}))
        if study is not None:
            with warnings.catch_warnings():  # add_trial and create_trial are "experimental"
                warnings.simplefilter("ignore")
                study.add_trial(optuna.trial.create_trial(
                    params={"task.optim.lr": lr, "model.cell": cell}, value=value,
                    distributions={"task.optim.lr": FloatDistribution(1e-4, 1.0, log=True),
                                   "model.cell": CategoricalDistribution(["gru", "lstm"])}))
    return folder


# JavaScript for a chromium_dom probe: each <img class="plot">'s box on the page and its PNG's size,
# "left,top,width,height,naturalWidth,naturalHeight;…" in the body's data-plots
PLOT_BOXES_PROBE = ("document.body.dataset.plots = [...document.images].filter(i => i.className == 'plot')"
                    ".map(i => { const r = i.getBoundingClientRect(); return [r.left, r.top, r.width, "
                    "r.height, i.naturalWidth, i.naturalHeight].map(Math.round).join(','); }).join(';');")


def plots_in_screenshot(shot: Path, boxes: str, imgs: list) -> list:
    """Checks that every plot <img> (``boxes``: :data:`PLOT_BOXES_PROBE`'s, ``imgs``: the page's
    <img> attributes in order) shows at its PNG's own size inside the window's width; then per
    plot wholly inside the screenshot ``shot``: (alt, mean |difference| (0–255) of the pixels
    there from its PNG's, which a data URI holds). A shrunk or cropped plot (a legend beside the
    axes squeezed or cut off) differs."""
    import base64
    import io

    import numpy as np
    from PIL import Image

    with Image.open(shot) as im:
        page = np.asarray(im.convert("RGB"), dtype=float)
    plots, boxes = [a for a in imgs if a.get("class") == "plot"], boxes.split(";")
    assert len(plots) == len(boxes), (len(plots), boxes)
    out = []
    for attrs, box in zip(plots, boxes):
        left, top, width, height, natural_w, natural_h = map(int, box.split(","))
        assert (width, height) == (natural_w, natural_h), (attrs["alt"], box)  # not scaled
        assert 0 <= left and left + width <= page.shape[1], (attrs["alt"], box)  # not cut off
        if top + height <= page.shape[0]:
            with Image.open(io.BytesIO(base64.b64decode(attrs["src"].split(",", 1)[1]))) as png:
                want = np.asarray(png.convert("RGB"), dtype=float)
            out.append((attrs["alt"], float(np.abs(page[top:top + height, left:left + width] - want).mean())))
    return out


def experiments() -> List[str]:
    return sorted(p.stem for p in (CONF / "experiment").glob("*.yaml"))


def readme_block_example(name: str = ""):
    """The README's "Writing a block" example: (code, its attnflow-train overrides, block name),
    the code registering under ``name`` instead when given (tests that must not collide)."""
    section = (ROOT / "README.md").read_text().split("## Writing a block", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    overrides = re.search(r"`attnflow-train (scorer\.name=\S+[^`]*)`", section).group(1).split()
    registered = re.search(r'register\("(\w+)"\)', code).group(1)
    if name:
        code = code.replace(f'"{registered}"', f'"{name}"')
    return code, overrides, name or registered


PAD, BOS, EOS = 0, 1, 2  # the special ids of tiny_translation_task and pair_batch


def tiny_translation_task(dropout: float = 0.0, **task):
    """A translation task on a 1+1-layer, d=16 Transformer over 12 ids (seeded), for loss tests."""
    import torch

    from attnflow.config.registry import MODELS, TASKS

    torch.manual_seed(0)
    model = MODELS.build({"name": "transformer", "d_model": 16, "ffn_dim": 32, "encoder_layers": 1,
                          "decoder_layers": 1, "dropout": dropout,
                          "attention": {"name": "multihead", "heads": 2,
                                        "scorer": {"name": "scaled_dot"}}},
                         src_vocab=12, tgt_vocab=12, pad_id=PAD, path="model")
    return TASKS.build({"name": "translation", **task}, model, pad_id=PAD, bos_id=BOS, eos_id=EOS,
                       max_decode_len=6, itos=[str(i) for i in range(12)], path="task")


def pair_batch() -> dict:
    """Two sentence pairs, the second padded: src, src_lengths, tgt_in (⟨BOS⟩ first), tgt_out."""
    import torch

    src = torch.tensor([[5, 6, 7, EOS], [8, 3, EOS, PAD]])
    tgt_out = torch.tensor([[7, 6, 5, EOS], [3, 8, EOS, PAD]])
    tgt_in = torch.cat([torch.full((2, 1), BOS), tgt_out[:, :-1]], 1)
    return {"src": src, "src_lengths": torch.tensor([4, 3]), "tgt_in": tgt_in, "tgt_out": tgt_out}
