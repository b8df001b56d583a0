"""Full disks and read-only folders: every command checks where it writes before any work; a
write that fails mid-run is one message naming the file and what was kept, and leaves no part of
a file; a resume that fails before it saved a checkpoint leaves its run folder byte-identical.
On small tmpfs mounts (a test that needs one is skipped where this user may not mount); a
read-only folder is a read-only mount, or a folder without write permission for a user who is
not root."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from attnflow.cli import average, evaluate, predict, report, translate
from attnflow.io.checkpoints import read_checkpoint
from cli_runs import GRAPH, fabricate_run, parallel_files, translation_overrides
from support import train_cli

TINY = ["data.train_size=64", "data.val_size=16", "data.test_size=16", "data.batch_size=32",
        "trainer.accelerator=cpu", "trainer.enable_model_summary=false", "callbacks.progress_bar=none",
        "callbacks.attention_maps.examples=0", "logger=csv"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A finished two-epoch run of the default experiment that kept its last epochs to average."""
    run = tmp_path_factory.mktemp("disk") / "run"
    with pytest.MonkeyPatch.context() as mp:
        assert train_cli(mp, *TINY, "trainer.max_epochs=2", "callbacks.average={last: 2}",
                         f"hydra.run.dir={run}") == 0
    return run


@pytest.fixture
def mount(tmp_path):
    """``mount(name, size)``: a tmpfs of ``size`` bytes under tmp_path; unmounted after the test."""
    made = []

    def make(name: str, size: int) -> Path:
        folder = tmp_path / name
        folder.mkdir()
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
                              capture_output=True, text=True)
        if done.returncode:
            pytest.skip(f"this user may not mount a tmpfs ({done.stderr.strip() or done.returncode})")
        made.append(folder)
        return folder

    yield make
    for folder in reversed(made):
        subprocess.run(["umount", "-l", str(folder)], check=False)


def _freeze(folder: Path) -> None:
    """Make ``folder`` read-only: remounted so, or (for a user who is not root) its modes."""
    if os.geteuid() == 0:
        subprocess.run(["mount", "-o", "remount,ro", str(folder)], check=True)
        return
    for path in [folder, *folder.rglob("*")]:
        if path.is_dir():
            path.chmod(0o555)


def _digests(folder: Path) -> dict:
    return {str(p.relative_to(folder)): hashlib.sha1(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _fill(folder: Path, leave: int) -> None:
    """Fill ``folder``'s file system up to ``leave`` free bytes (with a file beside the runs)."""
    with open(folder / "filler", "wb") as f:
        os.posix_fallocate(f.fileno(), 0, max(shutil.disk_usage(folder).free - leave, 1))


def _status(main, args, capsys):
    """(exit status, stdout, stderr) of a console script's main()."""
    try:
        code = main(args)
    except SystemExit as stop:
        code = stop.code
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.slow
def test_every_command_refuses_an_output_it_cannot_write_before_any_work(trained, tmp_path, mount,
                                                                        monkeypatch, capsys):
    gat = fabricate_run(GRAPH, tmp_path / "gat")
    mt = fabricate_run(translation_overrides(parallel_files(tmp_path / "de-en")), tmp_path / "mt")
    ro = mount("ro", 64 << 20) if os.geteuid() == 0 else tmp_path / "ro"
    ro.mkdir(exist_ok=True)
    shutil.copytree(trained, ro / "run")
    before = _digests(ro)
    _freeze(ro)
    monkeypatch.setenv("ATTNFLOW_OUTPUT_DIR", str(ro / "outputs"))
    assert train_cli(monkeypatch, *TINY) == 2  # the default folder, outputs/<date>/<time>
    assert f"hydra.run.dir={ro}/outputs/" in capsys.readouterr().err
    assert train_cli(monkeypatch, *TINY, f"hydra.run.dir={ro / 'new'}") == 2
    assert f"cannot write the run folder {ro / 'new'}: " in capsys.readouterr().err  # (its lock)
    cases = [(evaluate.main, [str(gat), "-o", str(ro / "m.json")], "-o"),
             (evaluate.main, [str(ro / "run")], "without -o the metrics go to"),
             (predict.main, [str(gat), "-o", str(ro / "nodes.csv")], "-o"),
             (translate.main, [str(mt), "Ein Hund schläft.", "--attention", str(ro / "a.png")], "--attention"),
             (average.main, [str(ro / "run"), "--name", "again.ckpt"], "--name again.ckpt"),
             (report.main, [str(ro / "run")], "the report folder"),
             (report.main, [str(gat), "-o", str(ro / "rep")], "-o")]
    for main, args, option in cases:
        code, out, err = _status(main, args, capsys)
        assert code == 2 and err.count("\n") == 1 and "cannot write in" in err and option in err, (args, err)
        assert out == ""
    shutil.rmtree(tmp_path / "gat" / "report", ignore_errors=True)
    assert _digests(ro) == before


@pytest.mark.slow
def test_a_full_disk_mid_run_is_one_message_naming_the_file_and_what_was_kept(trained, mount, monkeypatch,
                                                                             capsys):
    size = (trained / "checkpoints" / "last.ckpt").stat().st_size
    disk = mount("disk", 64 << 20)
    _fill(disk, leave=size * 3 // 2)  # room for the first epoch's checkpoint, not for last.ckpt
    run = disk / "run"
    assert train_cli(monkeypatch, *TINY, "trainer.max_epochs=2", f"hydra.run.dir={run}") == 1
    err = capsys.readouterr().err
    kept = sorted(p.name for p in (run / "checkpoints").iterdir())
    assert kept == ["epoch0-step2.ckpt", "epoch0-step2.ckpt.sha256"] and "Traceback" not in err
    assert err.splitlines()[-1] == (
        f"attnflow: cannot write {run}/checkpoints/last.ckpt: No space left on device; kept "
        f"epoch0-step2.ckpt in {run}/checkpoints; no last.ckpt to resume from")
    assert not list(disk.rglob("*.tmp"))  # no part of a file
    assert read_checkpoint(run / "checkpoints" / "epoch0-step2.ckpt")["global_step"] == 2


@pytest.mark.slow
def test_a_resume_that_fails_on_a_full_disk_leaves_the_run_byte_identical(trained, mount, monkeypatch,
                                                                          capsys):
    size = (trained / "checkpoints" / "last.ckpt").stat().st_size
    disk = mount("disk", 64 << 20)
    run = disk / "run"
    shutil.copytree(trained, run)
    before = _digests(run)
    _fill(disk, leave=size // 2)  # room for its record and logs, not for a checkpoint
    assert train_cli(monkeypatch, f"resume={run}", "trainer.max_epochs=3") == 1
    err = capsys.readouterr().err
    assert err.splitlines()[-1] == (f"attnflow: cannot write {run}/checkpoints/last.ckpt: No space "
                                    f"left on device; {run} is as it was")
    assert _digests(run) == before  # no resume-1.yaml, no csv/version_1, train.log as it was


@pytest.mark.parametrize("logger, blocked", [("wandb", "wandb"), ("tensorboard", "tensorboard"),
                                             ("csv", "csv")])
@pytest.mark.slow
def test_a_file_where_a_logger_keeps_its_folder_is_one_line_and_the_run_stays_as_it_was(
        trained, tmp_path, monkeypatch, capsys, logger, blocked):
    """A resume whose logger finds a plain file where it makes its folder: one line naming that
    file, exit 1, and no byte of the run changed (no resume-1.yaml, log version or train.log
    line left)."""
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    if blocked == "csv":
        shutil.rmtree(run / "csv")
    (run / blocked).write_text("mine\n")
    before = {**_digests(run), "folders": sorted(str(p) for p in run.rglob("*") if p.is_dir())}
    monkeypatch.setenv("WANDB_MODE", "offline")
    assert train_cli(monkeypatch, f"resume={run}", f"logger=[csv,{logger}]", "trainer.max_epochs=3") == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and "Error executing job" not in err
    last = err.splitlines()[-1]
    assert last.startswith("attnflow: ") and last.endswith(f"{run / blocked} is a file, where a folder "
                                                           f"belongs; {run} is as it was"), last
    assert {**_digests(run), "folders": sorted(str(p) for p in run.rglob("*") if p.is_dir())} == before
