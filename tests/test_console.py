"""What attnflow-train prints: text progress lines when output is not a terminal, the final
metrics table, and a quick ``--help`` listing every config group and its options.
(The console script's output through a pipe, progress and tables: tests/test_sweeps.py's grid run.)"""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from types import SimpleNamespace

import pytest
import pytorch_lightning as pl
import torch
from omegaconf import DictConfig, OmegaConf
from pytorch_lightning.callbacks import RichProgressBar
from torch.utils.data import DataLoader, TensorDataset

from attnflow.io.console import BARS, print_metrics
from attnflow.training.progress import TextProgressBar, progress_bar
from attnflow.config.registry import ConfigError
from attnflow.training.validate import resolve_config
from support import CONF, ROOT, compose_cfg, train_cli


# -- progress ------------------------------------------------------------------------------------------
class _Tiny(pl.LightningModule):
    """A linear regression, logging as attnflow's tasks do (``split/name``)."""

    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(2, 1)

    def _loss(self, batch):
        return (self.layer(batch[0]) - batch[1]).pow(2).mean()

    def training_step(self, batch, batch_idx):
        loss = self._loss(batch)
        self.log("train/loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch, batch_idx):
        self.log("val/loss", self._loss(batch), prog_bar=True)

    def test_step(self, batch, batch_idx):
        self.log("test/loss", self._loss(batch))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _loader(n):
    g = torch.Generator().manual_seed(0)
    return DataLoader(TensorDataset(torch.randn(n, 2, generator=g), torch.randn(n, 1, generator=g)), batch_size=1)


def _due(batches, every):
    """Batches after which a line is due: every ``every``-th, except the loop's last."""
    return [k for k in range(1, batches + 1) if k % every == 0 and k < batches]


def test_text_progress_lines_follow_the_steps_and_epochs(capsys, tmp_path):
    train, val, test, every, epochs = 10, 4, 5, 3, 2
    trainer = pl.Trainer(max_epochs=epochs, log_every_n_steps=every, callbacks=[TextProgressBar()],
                         logger=False, enable_checkpointing=False, enable_model_summary=False,
                         num_sanity_val_steps=0, default_root_dir=tmp_path, accelerator="cpu")
    model = _Tiny()
    trainer.fit(model, _loader(train), _loader(val))
    trainer.test(model, _loader(test), verbose=False)
    lines = capsys.readouterr().out.splitlines()

    steps = [l for l in lines if re.match(r"epoch \d/\d step ", l)]
    assert [l.split()[3] for l in steps] == [f"{k}/{train}" for _ in range(epochs) for k in _due(train, every)]
    assert all(re.search(r"\(\d+%\) [\d.]+ it/s eta \d+:\d\d train/loss=[\d.e+-]+$", l) for l in steps), steps
    vals = [l for l in lines if re.match(r"epoch \d/\d val step ", l)]
    assert [l.split()[4] for l in vals] == [f"{k}/{val}" for _ in range(epochs) for k in _due(val, every)]
    done = [l for l in lines if " done in " in l]
    assert [l.split(" done")[0] for l in done] == [f"epoch {e}/{epochs - 1}" for e in range(epochs)]
    assert all(re.search(r"train/loss=\S+ val/loss=\S+$", l) for l in done), done
    assert [l.split()[2] for l in lines if l.startswith("test step")] == [f"{k}/{test}" for k in _due(test, every)]


def test_a_run_resumed_mid_epoch_times_only_the_batches_it_trains(capsys, monkeypatch):
    """Lightning starts no epoch when a run resumes mid-epoch (no on_train_epoch_start): the rate,
    eta and epoch time count from the first batch trained, not from nothing (was 4e11 it/s)."""
    import attnflow.training.progress as progress

    now = [1000.0]
    monkeypatch.setattr(progress.time, "monotonic", lambda: now[0])
    monkeypatch.setattr(TextProgressBar, "total_train_batches", property(lambda self: 454))
    bar = TextProgressBar(every_n_steps=50)
    monkeypatch.setattr(bar, "get_metrics", lambda trainer, module: {})
    trainer = SimpleNamespace(log_every_n_steps=50, max_epochs=40, current_epoch=8, callback_metrics={})
    for batch_idx in range(375, 454):  # resumed after 375 batches of epoch 9; 0.4 s a batch
        now[0] += 0.4
        bar.on_train_batch_end(trainer, None, None, None, batch_idx)
    bar.on_train_epoch_end(trainer, None)
    trainer.current_epoch = 9  # the next epoch starts as usual
    bar.on_train_epoch_start(trainer, None)
    for batch_idx in range(50):
        now[0] += 0.5
        bar.on_train_batch_end(trainer, None, None, None, batch_idx)
    # 24 batches timed in 9.6 s by step 400: 2.5 it/s, 54 to go: 22 s; the epoch's 78 in 31.2 s
    assert capsys.readouterr().out.splitlines() == [
        "epoch 8/39 step 400/454 (88%) 2.5 it/s eta 0:22",  # 0-based, as Lightning's bar
        "epoch 8/39 step 450/454 (99%) 2.5 it/s eta 0:02",
        "epoch 8/39 done in 0:31 (resumed after step 376)",
        "epoch 9/39 step 50/454 (11%) 2.0 it/s eta 3:22"]


def test_auto_is_rich_on_a_terminal_and_text_elsewhere(monkeypatch):
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.setenv("FORCE_COLOR", "1")  # colour in a CI log is still a log: lines
    monkeypatch.setattr(sys, "stdout", io.StringIO())  # a pipe or a file
    assert isinstance(progress_bar("auto"), TextProgressBar)
    monkeypatch.setattr(sys, "stdout", Terminal())
    assert isinstance(progress_bar("auto"), RichProgressBar)
    assert progress_bar("none") is None and isinstance(progress_bar("text"), TextProgressBar)


def test_an_unknown_progress_bar_is_refused_naming_the_choices():
    with pytest.raises(ConfigError) as err:
        resolve_config(compose_cfg(["callbacks.progress_bar=fancy"]))
    assert "callbacks.progress_bar" in str(err.value) and all(b in str(err.value) for b in BARS)
    assert compose_cfg([]).callbacks.progress_bar == "auto"


def test_final_metrics_table_has_a_row_per_metric_and_a_column_per_split():
    metrics = {"val/loss": 0.123456, "val/acc": 0.5, "test/loss": 0.25, "test/acc": 0.75, "val/f1": 0.4}
    out = io.StringIO()
    print_metrics(metrics, file=out)
    rows = {cells[0]: cells[1:] for cells in
            ([c.strip() for c in line.strip("│").split("│")] for line in out.getvalue().splitlines()
             if line.startswith("│"))}
    header = next(l for l in out.getvalue().splitlines() if l.startswith("┃"))
    assert [c.strip() for c in header.strip("┃").split("┃")] == ["metric", "validation", "test"]
    assert rows == {"acc": ["0.5", "0.75"], "f1": ["0.4", ""], "loss": ["0.1235", "0.25"]}
    out = io.StringIO()  # a run's result: the best checkpoint's validation, then its test
    print_metrics({"test/acc": 0.75, "best/val/acc": 0.5}, file=out)
    header = next(l for l in out.getvalue().splitlines() if l.startswith("┃"))
    assert [c.strip() for c in header.strip("┃").split("┃")] == ["metric", "best/val", "test"]


@pytest.mark.slow
def test_the_final_metrics_title_names_the_weights_they_are_of(tmp_path, capsys):
    """callbacks.checkpoint.save_top_k=0 keeps no best checkpoint, so the run evaluates its last
    weights; the table said "final metrics (best checkpoint)" all the same. Its title now comes
    from the run's summary: best, averaged, or last weights."""
    from attnflow.training.run import train
    from attnflow.training.runlog import evaluated_weights, final_table
    from support import FAST

    args = [*FAST, "logger=none", "trainer.limit_train_batches=2", "trainer.limit_val_batches=2",
            "trainer.limit_test_batches=2", "callbacks.attention_maps.examples=0"]
    kept = train(compose_cfg(args), tmp_path / "kept")
    none = train(compose_cfg([*args, "callbacks.checkpoint.save_top_k=0"]), tmp_path / "none")
    assert kept["best_checkpoint"] and not none["best_checkpoint"]
    assert evaluated_weights(kept) == "best checkpoint" and evaluated_weights(none) == "last weights"
    assert evaluated_weights({**kept, "averaged_from": {"n": 2}}) == "averaged checkpoint"
    final_table(none)
    assert "final metrics (last weights)" in capsys.readouterr().out


# -- --help ----------------------------------------------------------------------------------------------
HELP = """
import sys
sys.argv = ["attnflow-train", {flag!r}]
from attnflow.cli.train import main
main()
print("MODULES", sorted(m for m in ("torch", "hydra", "pytorch_lightning", "lightning", "optuna") if m in sys.modules))
"""


def _help(flag):
    env = dict(os.environ, COLUMNS="400")
    return subprocess.run([sys.executable, "-X", "importtime", "-c", HELP.format(flag=flag)], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=60)


def _first_comment(path):
    for line in path.read_text().splitlines():
        if line.startswith("#") and not line.startswith("# @package"):
            return line.lstrip("#").strip()
    return None


def test_help_lists_every_group_and_option_without_heavy_imports():
    proc = _help("--help")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert out.startswith("usage: attnflow-train") and "--hydra-help" in out and "hparams_search=NAME" in out
    assert "MODULES []" in out  # no torch, Lightning, Hydra or Optuna for --help
    # the imports took well under a second: -X importtime's cumulative microseconds of top-level imports
    top = [int(m) for m in re.findall(r"^import time:\s+\d+ \|\s+(\d+) \| \S", proc.stderr, re.M)]
    assert sum(top) < 1_000_000, sum(top)
    listed, defaults = {}, {}  # {group: {option: description}}, {group: option marked *}
    for line in out.split("Config groups", 1)[1].splitlines()[1:]:
        if re.match(r"^  \S", line):
            group = listed.setdefault(line.split()[0], {})
            name = line.split()[0]
        elif m := re.match(r"^    ([* ]) (\S+)\s+(.*)$", line):
            group[m.group(2)] = m.group(3)
            if m.group(1) == "*":
                defaults[name] = m.group(2)
    folders = {p.name for p in CONF.iterdir() if p.is_dir() and p.name != "hydra"}
    assert folders | {"hydra/launcher", "hydra/sweeper"} <= set(listed), folders - set(listed)
    for path in [*CONF.glob("*/*.yaml"), *CONF.glob("hydra/*/*.yaml"), *CONF.glob("hydra/sweeper/*/*.yaml")]:
        group = path.parent.relative_to(CONF).as_posix()
        if group == "hydra":
            continue
        assert path.stem in listed[group], path
        if _first_comment(path):
            assert listed[group][path.stem] == _first_comment(path)
    assert {"joblib", "submitit_slurm", "basic"} <= set(listed["hydra/launcher"])  # the plugins' own
    assert {"optuna", "basic"} <= set(listed["hydra/sweeper"])
    optuna = compose_cfg(["hydra/sweeper=optuna"], return_hydra_config=True).hydra.runtime.choices
    for group in ("hydra/sweeper/sampler", "hydra/sweeper/pruner"):  # the sweeper's own defaults
        assert defaults[group] == optuna[group]
    root = OmegaConf.load(CONF / "train.yaml").defaults
    expected = {g.removeprefix("override "): o for entry in root if isinstance(entry, DictConfig)
                for g, o in entry.items() if o and g != "hydra"}  # (an override of a Hydra group: that group)
    assert {g: defaults.get(g) for g in expected} == expected


@pytest.mark.slow
def test_short_help_is_the_same_and_hydra_help_stays_reachable(monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "400")
    shown = []
    for flag in ("-h", "--help", "--hydra-help"):
        assert train_cli(monkeypatch, flag) == 0
        shown.append(capsys.readouterr().out)
    assert shown[0] == shown[1] and shown[0].startswith("usage: attnflow-train")
    assert "== Flags ==" in shown[2] and "--multirun" in shown[2]


def test_help_says_which_plugins_are_not_installed(monkeypatch):
    """With no Hydra plugin installed there is no ``hydra_plugins`` package at all: find_spec gives
    None for it and raises for its submodules, as importlib does; every plugin option then says
    which extra installs it, and Hydra's own options say nothing."""
    import importlib.util

    from attnflow.cli.help import train_help

    real = importlib.util.find_spec

    def find_spec(name, package=None):
        if name in ("hydra_plugins", "optuna", "joblib", "submitit"):
            return None
        if name.startswith("hydra_plugins."):
            raise ModuleNotFoundError("No module named 'hydra_plugins'", name="hydra_plugins")
        return real(name, package)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    lines = {m.group(1): m.group(2) for m in re.finditer(r"^    [* ] (\S+)\s+(.*)$",
                                                          train_help(CONF, width=400), re.M)}
    for option, extra in (("optuna", "sweep"), ("joblib", "launchers"), ("submitit_local", "launchers"),
                          ("submitit_slurm", "launchers")):
        assert lines[option].endswith(f'(not installed: pip install -e ".[{extra}]")'), lines[option]
    assert "not installed" not in lines["basic"]
    monkeypatch.setattr(importlib.util, "find_spec", real)  # installed here ([dev]): no note
    assert "not installed" not in train_help(CONF, width=400)
