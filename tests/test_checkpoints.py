"""attnflow/io/checkpoints.py: which checkpoint a run directory names, and safe reading."""

import json
import pickle
import shutil
import subprocess
import sys

import pytest
import torch

from attnflow.io.checkpoints import CheckpointError, find_checkpoint, read_checkpoint, torch_device
from support import ROOT


def _run_dir(root):
    run = root / "run"
    (run / "checkpoints").mkdir(parents=True)
    for name in ("epoch1-step10.ckpt", "epoch3-step30.ckpt", "last.ckpt"):
        torch.save({"state_dict": {"w": torch.ones(1)}, "name": name}, run / "checkpoints" / name)
    best = run / "checkpoints" / "epoch1-step10.ckpt"
    (run / "metrics.json").write_text(json.dumps({"best_checkpoint": str(best.resolve())}))
    return run


def test_best_checkpoint_then_last_then_any(tmp_path):
    run = _run_dir(tmp_path)
    assert find_checkpoint(run) == (run / "checkpoints" / "epoch1-step10.ckpt", run)
    for damaged in ("{not json", "[1, 2]", '{"best_checkpoint": 5}'):  # fall back to last.ckpt
        (run / "metrics.json").write_text(damaged)
        assert find_checkpoint(run)[0].name == "last.ckpt", damaged
    (run / "metrics.json").unlink()
    assert find_checkpoint(run)[0].name == "last.ckpt"
    (run / "checkpoints" / "last.ckpt").unlink()
    assert find_checkpoint(run)[0].name == "epoch1-step10.ckpt"  # sorted: the first
    ckpt = run / "checkpoints" / "epoch3-step30.ckpt"
    assert find_checkpoint(ckpt) == (ckpt, run)  # a file: its run directory is two levels up


def test_a_moved_run_directory_still_uses_its_best_checkpoint(tmp_path):
    run = _run_dir(tmp_path)
    moved = tmp_path / "elsewhere"
    shutil.move(run, moved)  # metrics.json still names the old absolute path
    ckpt, run_dir = find_checkpoint(moved)
    assert (ckpt, run_dir) == (moved / "checkpoints" / "epoch1-step10.ckpt", moved)
    assert read_checkpoint(ckpt)["name"] == "epoch1-step10.ckpt"


def test_a_copied_run_directory_reads_its_own_checkpoint_not_the_originals(tmp_path):
    """metrics.json of the copy still names the original's absolute path, which exists."""
    run = _run_dir(tmp_path)
    copy = tmp_path / "copy"
    shutil.copytree(run, copy)
    assert find_checkpoint(copy) == (copy / "checkpoints" / "epoch1-step10.ckpt", copy)
    (copy / "checkpoints" / "epoch1-step10.ckpt").unlink()  # not in the copy: its own last.ckpt,
    assert find_checkpoint(copy) == (copy / "checkpoints" / "last.ckpt", copy)  # not the original's


def test_device_is_checked_before_the_checkpoint_is_read(monkeypatch):
    """--device of attnflow-eval/predict/translate: a device this machine lacks is named as such
    (torch would fail to map the checkpoint, and the message would blame the file)."""
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)  # a stand-in machine with two GPUs
    assert [torch_device(d) for d in ("cpu", "gpu", "cuda", "cuda:1")] == ["cpu", "cuda", "cuda", "cuda:1"]
    with pytest.raises(CheckpointError, match=r"--device cuda:2: this machine shows 2 CUDA GPU\(s\)"):
        torch_device("cuda:2")
    with pytest.raises(CheckpointError, match=r"--device bogus is not a device: use cpu, cuda"):
        torch_device("bogus")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    with pytest.raises(CheckpointError, match=r"--device gpu: this machine shows 0 CUDA GPU\(s\).*use --device cpu"):
        torch_device("gpu")


class _Boom:
    def __reduce__(self):
        return (print, ("unpickled arbitrary code",))


def test_reading_refuses_what_is_not_a_plain_checkpoint(tmp_path, capsys):
    with pytest.raises(CheckpointError, match="no such run directory or checkpoint"):
        find_checkpoint(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointError, match="without checkpoints"):
        find_checkpoint(tmp_path / "empty")
    evil = tmp_path / "evil.ckpt"
    evil.write_bytes(pickle.dumps({"state_dict": {}, "x": _Boom()}))
    with pytest.raises(CheckpointError, match="cannot read checkpoint"):
        read_checkpoint(evil)
    assert "unpickled arbitrary code" not in capsys.readouterr().out
    plain = tmp_path / "plain.ckpt"
    torch.save({"weights": torch.ones(1)}, plain)
    with pytest.raises(CheckpointError, match="no state_dict"):
        read_checkpoint(plain)


def test_a_sweep_folder_or_a_file_that_is_no_checkpoint_is_named_for_what_it_is(tmp_path, capsys):
    """attnflow-eval/-predict/-translate on a sweep folder said it was "a directory without
    checkpoints (expected <sweep>/checkpoints/*.ckpt)"; on a run's config.yaml that it "holds
    objects other than tensors …", with PyTorch's advice to set weights_only=False."""
    from attnflow.cli.evaluate import main as evaluate

    sweep = tmp_path / "sweep"
    for job in ("0", "1", "10", "2"):
        (sweep / job / "checkpoints").mkdir(parents=True)
        (sweep / job / "config.yaml").write_text("data: {name: reverse}\n")
    (sweep / "multirun.yaml").write_text("hydra: {}\n")
    with pytest.raises(CheckpointError) as err:
        find_checkpoint(sweep)
    assert str(err.value) == (f"{sweep} is a multirun (sweep) folder, not a run directory: name one "
                              f"of its runs ({sweep / '0'}, {sweep / '1'}, {sweep / '2'}, "
                              f"{sweep / '10'}); attnflow-report {sweep} ranks them")
    (sweep / "multirun.yaml").unlink()  # outputs/<date>/: a folder of single runs
    with pytest.raises(CheckpointError, match=r"is a folder of runs, not a run directory: .*; "
                                              r"attnflow-report .* ranks them$"):
        find_checkpoint(sweep)  # (within each experiment, where they are of several)
    for name, text in (("config.yaml", "data:\n  name: reverse\n"), ("metrics.json", '{"metrics": {}}')):
        (tmp_path / name).write_text(text)
        assert evaluate([str(tmp_path / name)]) == 2
        said = capsys.readouterr().err
        assert f"cannot read checkpoint {tmp_path / name}: it is not a checkpoint: a .ckpt of " \
               f"attnflow-train is a torch archive (a zip), and this file starts with {text[:16]!r}" in said
        assert "weights_only" not in said and said.count("\n") == 1


def test_a_config_without_data_or_model_is_named_as_such(tmp_path):
    """load_run refuses a checkpoint without a run config (the checkpoint's or config.yaml)."""
    from attnflow.io.checkpoints import load_run

    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    ckpt = run / "checkpoints" / "last.ckpt"
    torch.save({"state_dict": {}}, ckpt)
    refusal = r"last.ckpt is not an attnflow run: .*config.yaml is a run config with .*'data'"
    with pytest.raises(CheckpointError, match=refusal):
        load_run(run)
    (run / "config.yaml").write_text("- just\n- a list\n")
    with pytest.raises(CheckpointError, match=refusal):
        load_run(run)
    torch.save({"state_dict": {}, "attnflow_config": {"data": {"name": "x"}}}, ckpt)
    with pytest.raises(CheckpointError, match=refusal):
        load_run(run)


def test_a_fine_tuned_run_is_rebuilt_without_its_pretraining_run(tmp_path):
    """eval/predict/translate rebuild a run from its own checkpoint, which holds every weight:
    model.init_from (a pretraining run, maybe moved or deleted since) is not read again."""
    import torch

    from attnflow.io.checkpoints import load_run

    (tmp_path / "checkpoints").mkdir()
    cfg = {"data": {"name": "text_classification"}, "task": {"name": "text_classification"},
           "model": {"name": "bert", "head": "sequence", "init_from": str(tmp_path / "gone")}}
    torch.save({"state_dict": {}, "attnflow_config": cfg}, tmp_path / "checkpoints" / "last.ckpt")
    run = load_run(tmp_path)
    assert run.config["model"]["init_from"] is None and run.config["model"]["head"] == "sequence"
    assert cfg["model"]["init_from"] == str(tmp_path / "gone")  # the saved record is not changed


@pytest.mark.parametrize("tool, args, refusal", [
    ("evaluate", ["config.yaml"], "attnflow-eval: cannot read checkpoint {t}/config.yaml: it is not a "
                                  "checkpoint: a .ckpt of attnflow-train is a torch archive (a zip), "
                                  "and this file starts with 'data:\\n  name: re'"),
    ("predict", ["missing", "A great film."], "attnflow-predict: no such run directory or checkpoint: "
                                              "{t}/missing"),
    ("translate", ["sweep"], "attnflow-translate: {t}/sweep is a multirun (sweep) folder, not a run "
                             "directory: name one of its runs ({t}/sweep/0)"),
    ("average", ["missing"], "attnflow-average: no such run directory: {t}/missing"),
], ids=["eval", "predict", "translate", "average"])
def test_a_path_that_is_no_run_is_refused_before_torch_is_imported(tmp_path, tool, args, refusal):
    """attnflow-eval, -predict, -translate and -average, run as users run them (a fresh
    interpreter), refuse a path that is no run — missing, a sweep folder, a config.yaml — in one
    line with exit status 2 before torch or Lightning is imported (``-X importtime`` lists every
    module the process imported)."""
    (tmp_path / "config.yaml").write_text("data:\n  name: reverse\n")
    (tmp_path / "sweep" / "0").mkdir(parents=True)
    (tmp_path / "sweep" / "0" / "config.yaml").write_text("data: {name: reverse}\n")
    (tmp_path / "sweep" / "multirun.yaml").write_text("hydra: {}\n")
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", f"attnflow.cli.{tool}",
                           *(str(tmp_path / a) if i == 0 else a for i, a in enumerate(args))],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    message = [line for line in proc.stderr.splitlines() if not line.startswith("import time:")]
    assert len(message) == 1 and message[0].startswith(refusal.format(t=tmp_path)), message
    assert proc.stdout == ""
    imported = {line.split("|")[-1].strip() for line in proc.stderr.splitlines()
                if line.startswith("import time:")}
    assert "attnflow.io.checkpoints" in imported  # the import log is read
    assert not {"torch", "pytorch_lightning"} & imported
