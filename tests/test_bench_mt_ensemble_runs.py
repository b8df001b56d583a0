"""bench/mt_ensemble_runs.py's choices before any decoding: which checkpoint each run contributes,
and the command lines it refuses (one run, a missing run directory, an existing output file)."""

from __future__ import annotations

import json

import pytest

from support import load_bench


@pytest.fixture(scope="module")
def ens():
    return load_bench("mt_ensemble_runs")


def test_each_run_contributes_its_averaged_weights_or_else_its_last_checkpoint(ens, tmp_path, monkeypatch):
    # what attnflow-translate loads (find_checkpoint): the metrics.json's best (averaged.ckpt for a
    # run trained with callbacks.average), else last.ckpt; a .ckpt file as given
    averaged, plain = tmp_path / "a", tmp_path / "b"
    (averaged / "checkpoints").mkdir(parents=True)
    (averaged / "checkpoints" / "last.ckpt").write_bytes(b"")
    (averaged / "checkpoints" / "averaged.ckpt").write_bytes(b"")
    (averaged / "metrics.json").write_text(json.dumps({"best_checkpoint": str(averaged / "checkpoints" / "averaged.ckpt")}))
    (plain / "checkpoints").mkdir(parents=True)
    (plain / "checkpoints" / "last.ckpt").write_bytes(b"")
    chosen = plain / "checkpoints" / "avg-epochs-3-4.ckpt"
    chosen.write_bytes(b"")
    seen = {}

    def fake_load(ckpts):  # stop before reading the (empty) files
        seen["members"] = list(ckpts)
        raise SystemExit(0)

    import attnflow.inference.translation
    monkeypatch.setattr(attnflow.inference.translation, "load_members", fake_load)
    with pytest.raises(SystemExit):
        ens.main([str(averaged), str(plain), str(chosen), "--out", str(tmp_path / "o.json")])
    assert seen["members"] == [averaged / "checkpoints" / "averaged.ckpt", plain / "checkpoints" / "last.ckpt", chosen]


@pytest.mark.parametrize("case,message", [
    ("one run", "at least two run directories"),
    ("missing", "not a run directory or a .ckpt file"),
    ("not a checkpoint", "not a run directory or a .ckpt file"),
    ("out exists", "exists; give another path"),
])
def test_refusals_before_any_model_is_loaded(ens, tmp_path, capsys, case, message):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    out = tmp_path / "out.json"
    (tmp_path / "notes.txt").write_text("")
    argv = {"one run": [str(a)], "missing": [str(a), str(tmp_path / "nope")],
            "not a checkpoint": [str(a), str(tmp_path / "notes.txt")], "out exists": [str(a), str(b)]}[case]
    if case == "out exists":
        out.write_text("{}")
    with pytest.raises(SystemExit):
        ens.main([*argv, "--out", str(out)])
    assert message in capsys.readouterr().err
    if case == "out exists":
        assert out.read_text() == "{}"  # the earlier result is left as it was
