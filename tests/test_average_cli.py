"""attnflow-average (attnflow/cli/average.py): a run stopped before its fit ended gets the averaged
checkpoint the fit would have written — the mean of the kept epochs' weights, checked against
weights recorded by a callback of the test — or of the epochs named; attnflow-eval reads it; and
every problem is exit status 2 with a message naming the file or epoch, nothing written."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from attnflow.cli.average import main
from attnflow.cli.evaluate import main as eval_main
from averaging_runs import load, mean_state, train_recorded
from cli_runs import one_torch_thread  # noqa: F401  (autouse fixture: one torch thread)


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """3 epochs keeping the best 2 by val/loss: (run dir, recorder)."""
    run = tmp_path_factory.mktemp("avgcli") / "run"
    with pytest.MonkeyPatch.context() as mp:
        _, recorder = train_recorded(["trainer.max_epochs=3",
                                      "callbacks.average={best: 2, monitor: val/loss, mode: min}"], run, mp)
    return run, recorder


@pytest.fixture
def stopped(finished, tmp_path):
    """The run as a stop after its last validation leaves it: no averaged.ckpt, no metrics.json."""
    run = tmp_path / "run"
    shutil.copytree(finished[0], run)
    (run / "checkpoints" / "averaged.ckpt").unlink()
    (run / "metrics.json").unlink()
    return run, finished[1]


def _assert_mean(path, states):
    got = load(path)["state_dict"]
    want = mean_state(states)
    assert got.keys() == want.keys()
    for k, v in want.items():
        assert torch.allclose(got[k], v, rtol=0, atol=1e-6), k


@pytest.mark.slow
def test_a_stopped_run_gets_the_average_its_fit_would_have_written(finished, stopped, capsys):
    run, rec = stopped
    assert main([str(run)]) == 0
    kept = sorted(sorted(rec.scores, key=rec.scores.get)[:2])  # the 2 lowest val/loss, by the test
    out = run / "checkpoints" / "averaged.ckpt"
    _assert_mean(out, [rec.states[e] for e in kept])
    ckpt, last = load(out), load(run / "checkpoints" / "last.ckpt")
    assert ckpt["attnflow_average"]["epochs"] == kept
    assert ckpt["attnflow_config"] == last["attnflow_config"]
    fit = load(finished[0] / "checkpoints" / "averaged.ckpt")["state_dict"]  # the fit's own
    fit_summary = json.loads((finished[0] / "metrics.json").read_text())
    assert fit_summary["averaged_from"]["epochs"] == kept
    assert all(torch.equal(ckpt["state_dict"][k], fit[k]) for k in fit)
    err = capsys.readouterr()
    assert f"written to {out}" in err.err and "averaged" in err.out
    # attnflow-eval reads it as any checkpoint, and its val loss is the fit's averaged model's
    assert eval_main([str(out), "split=val", "-o", str(run / "val.json")]) == 0
    got = json.loads((run / "val.json").read_text())["metrics"]["val/loss"]
    want = json.loads((finished[0] / "metrics.json").read_text())["metrics"]["best/val/loss"]
    assert got == pytest.approx(want, abs=1e-6)


def test_epochs_average_a_subset_under_another_name(stopped):
    run, rec = stopped
    kept = sorted(sorted(rec.scores, key=rec.scores.get)[:2])
    assert main([str(run), "--epochs", str(kept[1]), "--name", "one.ckpt"]) == 0
    _assert_mean(run / "checkpoints" / "one.ckpt", [rec.states[kept[1]]])
    assert not (run / "checkpoints" / "averaged.ckpt").exists()


def _refused(argv, says, capsys):
    assert main(argv) == 2
    assert says in capsys.readouterr().err


@pytest.mark.slow
def test_problems_are_refused_with_status_2_and_nothing_written(finished, stopped, tmp_path, capsys):
    run, rec = stopped
    before = sorted(p.relative_to(run) for p in run.rglob("*"))
    avg = run / "checkpoints" / "avg"
    kept = [e["epoch"] for e in json.loads((avg / "kept.json").read_text())["kept"]]
    dropped = next(e for e in rec.states if e not in kept)
    _refused([str(run), "--epochs", str(dropped)], f"--epochs {dropped}: not kept; the kept epochs "
             f"are {' '.join(map(str, kept))}", capsys)
    _refused([str(tmp_path / "nowhere")], f"no such run directory: {tmp_path / 'nowhere'}", capsys)
    _refused([str(run / "checkpoints" / "last.ckpt")], "no such run directory: ", capsys)
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    (sweep / "multirun.yaml").write_text("hydra: {}\n")
    (sweep / "0").symlink_to(run, target_is_directory=True)
    _refused([str(sweep)], f"{sweep} is a multirun (sweep) folder, not a run directory: name one of "
             f"its runs ({sweep / '0'}); attnflow-report {sweep} ranks them", capsys)
    # a finished run's averaged.ckpt, or any existing output, is not overwritten
    done = finished[0] / "checkpoints" / "averaged.ckpt"
    data = done.read_bytes()
    _refused([str(finished[0])], f"{done} exists and is not overwritten", capsys)
    assert done.read_bytes() == data
    for name in ("last.ckpt", "../config.ckpt", "avg.pt", "sub/avg.ckpt", ".ckpt", "..ckpt"):
        _refused([str(run), "--name", name], f"--name {name}: a file name ending in .ckpt with a "
                 f"name before it", capsys)  # .ckpt was written as a hidden file
    assert sorted(p.relative_to(run) for p in run.rglob("*")) == before
    # a kept file gone, last.ckpt gone, and a run trained without callbacks.average
    (avg / f"epoch{kept[0]}.pt").unlink()
    _refused([str(run)], f"lists epoch{kept[0]}.pt, missing from {avg}", capsys)
    shutil.rmtree(avg)
    _refused([str(run)], "trained without callbacks.average", capsys)
    assert not (run / "checkpoints" / "averaged.ckpt").exists()


def test_a_run_without_last_ckpt_averages_into_its_epoch_checkpoint(stopped, capsys):
    """A run trained with save_last=false (gat_cora's preset) was refused: the average goes into
    a copy of its newest epoch checkpoint, as the callback's does; with none at all, refused."""
    run, recorder = stopped
    (run / "checkpoints" / "last.ckpt").unlink()
    (epoch,) = (run / "checkpoints").glob("epoch*.ckpt")
    assert main([str(run)]) == 0
    averaged = load(run / "checkpoints" / "averaged.ckpt")
    base = load(epoch)
    assert averaged.keys() - {"attnflow_average"} == base.keys() and averaged["epoch"] == base["epoch"]
    kept = sorted(sorted(recorder.scores, key=recorder.scores.get)[:2])  # the 2 lowest val/loss
    _assert_mean(run / "checkpoints" / "averaged.ckpt", [recorder.states[e] for e in kept])
    (run / "checkpoints" / "averaged.ckpt").unlink()
    epoch.unlink()
    _refused([str(run)], "holds no checkpoint of the run (last.ckpt or epoch*.ckpt)", capsys)


def test_a_missing_kept_file_left_out_by_epochs_is_no_obstacle(stopped, capsys):
    run, rec = stopped
    avg = run / "checkpoints" / "avg"
    kept = [e["epoch"] for e in json.loads((avg / "kept.json").read_text())["kept"]]
    (avg / f"epoch{kept[0]}.pt").unlink()
    _refused([str(run)], "--epochs can leave it out", capsys)
    assert main([str(run), "--epochs", str(kept[1])]) == 0
    _assert_mean(run / "checkpoints" / "averaged.ckpt", [rec.states[kept[1]]])
