"""attnflow-translate: arguments, file, stdin, run dir or checkpoint, heat map, clear errors."""

import io
import sys
from pathlib import Path

import pytest
import torch
import yaml

from attnflow.data.parallel import ParallelDataModule
from attnflow.config.registry import MODELS
from attnflow.cli.translate import main
from attnflow.io.weights import atomic_torch_save

MODEL = {"name": "seq2seq", "embed_dim": 8, "encoder": {"name": "rnn", "hidden_dim": 8},
         "decoder": {"name": "rnn_attention", "embed_dim": 8, "hidden_dim": 16}}


@pytest.fixture
def run_dir(tmp_path):
    """A run directory as attnflow-train leaves it: config, tokenizers, a checkpoint."""
    root = tmp_path / "data"
    root.mkdir()
    (root / "train.de").write_text("Ein Mann schläft.\nZwei Hunde spielen.\n" * 5)
    (root / "train.en").write_text("A man sleeps.\nTwo dogs play.\n" * 5)
    for stem in ("val", "test_2016_flickr"):  # the data module checks every split's files
        (root / f"{stem}.de").write_text("Ein Mann schläft.\n")
        (root / f"{stem}.en").write_text("A man sleeps.\n")
    data = {"name": "parallel", "root": str(root), "vocab_size": 60, "max_decode_len": 6}
    run = tmp_path / "run"
    dm = ParallelDataModule(**{k: v for k, v in data.items() if k != "name"})
    dm.set_run_dir(run)
    torch.manual_seed(0)
    model = MODELS.build(MODEL, **dm.model_context())
    (run / "checkpoints").mkdir(parents=True)
    cfg = {"data": data, "model": MODEL}
    (run / "config.yaml").write_text(yaml.safe_dump(cfg))
    atomic_torch_save({"state_dict": {f"model.{k}": v for k, v in model.state_dict().items()},
                       "attnflow_config": cfg}, run / "checkpoints" / "last.ckpt")
    return run


def test_arguments_file_stdin_agree(run_dir, tmp_path, capsys, monkeypatch):
    assert main([str(run_dir), "Ein Mann schläft.", "Zwei Hunde."]) == 0
    by_args = capsys.readouterr().out.splitlines()
    assert len(by_args) == 2
    f = tmp_path / "in.de"
    f.write_text("Ein Mann schläft.\nZwei Hunde.\n")
    assert main([str(run_dir / "checkpoints" / "last.ckpt"), "-f", str(f)]) == 0
    assert capsys.readouterr().out.splitlines() == by_args
    monkeypatch.setattr(sys, "stdin", io.StringIO("Ein Mann schläft.\nZwei Hunde.\n"))
    assert main([str(run_dir), "--beam", "1"]) == 0
    assert capsys.readouterr().out.splitlines() == by_args
    assert main([str(run_dir), "Ein Mann schläft.", "--beam", "3"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 1
    # options before the sentences, as attnflow-predict and attnflow-eval take them
    assert main([str(run_dir), "--beam", "1", "Ein Mann schläft.", "Zwei Hunde."]) == 0
    assert capsys.readouterr().out.splitlines() == by_args


def test_attention_png(run_dir, tmp_path):
    out = tmp_path / "alpha.png"
    assert main([str(run_dir), "Ein Mann schläft.", "--attention", str(out)]) == 0
    assert out.is_file() and out.read_bytes()[:4] == b"\x89PNG"


def test_empty_line_is_reported_and_kept_aligned(run_dir, tmp_path, capsys):
    f = tmp_path / "in.de"
    f.write_text("Ein Mann.\n\nZwei Hunde.\n")
    assert main([str(run_dir), "-f", str(f)]) == 0
    cap = capsys.readouterr()
    assert len(cap.out.splitlines()) == 3 and cap.out.splitlines()[1] == ""
    assert "line 2 is empty" in cap.err


def test_an_empty_input_is_refused_and_writes_nothing(run_dir, tmp_path, capsys, monkeypatch):
    """An empty -f file (or stdin) exited 0 without a word, and --save-attention wrote an archive
    of 0 lines (attnflow-predict refuses the same input)."""
    empty = tmp_path / "empty.de"
    empty.write_text("")
    npz, png = tmp_path / "a.npz", tmp_path / "a.png"
    assert main([str(run_dir), "-f", str(empty), "--save-attention", str(npz), "--attention", str(png)]) == 2
    cap = capsys.readouterr()
    assert cap.err == (f"attnflow-translate: no sentences given (arguments, -f FILE or stdin): "
                       f"-f {empty} holds no lines\n") and cap.out == ""
    assert not npz.exists() and not png.exists()
    monkeypatch.setattr(predict_io, "iter_stdin", lambda: iter([]))
    assert main([str(run_dir)]) == 2
    assert capsys.readouterr().err.endswith("stdin holds no lines\n")
    blank = tmp_path / "blank.de"  # a blank line is an input: answered with an empty line
    blank.write_text("\n")
    assert main([str(run_dir), "-f", str(blank)]) == 0 and capsys.readouterr().out == "\n"


def test_errors_are_one_clear_line(run_dir, tmp_path, capsys):
    assert main([str(tmp_path / "missing"), "x"]) == 2
    assert "no such run directory or checkpoint" in capsys.readouterr().err
    assert main([str(run_dir), "-f", str(tmp_path / "nofile.txt")]) == 2
    assert f"no such -f: {tmp_path / 'nofile.txt'}" in capsys.readouterr().err
    assert main([str(run_dir), "-f", str(tmp_path)]) == 2  # was "no such input file" of a folder
    assert capsys.readouterr().err == (f"attnflow-translate: -f {tmp_path}: a folder, not a file; "
                                       f"name a file of one input per line\n")
    bad = tmp_path / "bad.ckpt"
    bad.write_text("not a checkpoint")
    assert main([str(bad), "x"]) == 2
    assert "cannot read checkpoint" in capsys.readouterr().err
    empty = tmp_path / "empty_run"
    empty.mkdir()
    assert main([str(empty), "x"]) == 2
    assert "without checkpoints" in capsys.readouterr().err


# -- issue 14: long lines, '\n'-only lines and gzip, streaming, attention as data, failures ---------
import gzip  # noqa: E402
import shutil  # noqa: E402

import numpy as np  # noqa: E402

import attnflow.cli.predict_io as predict_io  # noqa: E402
import attnflow.inference.translation as mt  # noqa: E402
from cli_runs import (GRAPH, assert_streams, fabricate_run, parallel_files,  # noqa: E402
                      translation_overrides)


@pytest.fixture(scope="module")
def mt_runs(tmp_path_factory):
    """Untrained RNNsearch and Transformer runs on a tiny parallel corpus (max_src_len 12)."""
    base = tmp_path_factory.mktemp("mt_runs")
    data = parallel_files(base / "data")
    return {exp: fabricate_run(translation_overrides(data, exp), base / exp)
            for exp in ("mt_rnnsearch", "mt_transformer")}


def _src_tokenizer(run):
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(run / "tokenizer" / "de.json"))


def test_a_line_over_the_source_limit_is_cut_with_a_warning_counting_subwords(mt_runs, capsys):
    run = mt_runs["mt_rnnsearch"]
    line = "Zwei Hunde spielen und ein Mann schläft. " * 20
    n = len(_src_tokenizer(run).encode(line).ids)
    assert n > 12
    assert main([str(run), "Ein Mann schläft.", line]) == 0
    cap = capsys.readouterr()
    assert len(cap.out.splitlines()) == 2
    assert f"argument 2 has {n} subwords" in cap.err and f"{n - 12} subwords cut" in cap.err
    assert "argument 1" not in cap.err


def test_lines_split_on_newline_only_and_gzip_input(mt_runs, tmp_path, capsys):
    run = mt_runs["mt_rnnsearch"]
    lines = ["Ein Mann\u2028schläft.", "", "Zwei\x85Hunde spielen.", "Ein Kind lacht.\r"]
    plain = tmp_path / "in.de"
    plain.write_text("\n".join(lines) + "\n", encoding="utf-8", newline="")
    assert main([str(run), "-f", str(plain)]) == 0
    out = capsys.readouterr().out
    assert len(out.split("\n")) - 1 == len(lines)  # one output line per input line
    assert out.split("\n")[1] == ""
    packed = tmp_path / "in.de.gz"
    with gzip.open(packed, "wt", encoding="utf-8", newline="") as f:
        f.write("\n".join(lines) + "\n")
    assert main([str(run), "-f", str(packed)]) == 0
    assert capsys.readouterr().out == out
    assert main([str(run), "Ein Kind lacht."]) == 0  # the \r of a CRLF line is not part of it
    assert capsys.readouterr().out.splitlines()[0] == out.split("\n")[3]


def test_output_streams_batch_by_batch(mt_runs, monkeypatch):
    """Each batch is printed before the next input lines are read."""
    assert_streams(monkeypatch, predict_io, main, [str(mt_runs["mt_rnnsearch"])],
                   "Ein Mann schläft.")


def _rows_sum_to_one(a, axis=-1):
    np.testing.assert_allclose(a.sum(axis), 1.0, atol=1e-5)


def test_save_attention_rnn_alpha(mt_runs, tmp_path, capsys):
    run = mt_runs["mt_rnnsearch"]
    lines = ["Ein Mann schläft.", "", "Zwei Hunde spielen."]
    out = tmp_path / "attn.npz"
    assert main([str(run), *lines, "--save-attention", str(out)]) == 0
    z = np.load(out)  # no allow_pickle needed
    assert str(z["kind"]) == "translation" and int(z["lines"]) == 3
    tok = _src_tokenizer(run)
    model, dm, _ = mt.load(run)
    _, maps = mt.translate(model, dm, lines, need_weights=True)
    for i in (0, 2):
        S, T = len(tok.encode(lines[i]).ids), len(z[f"{i}/output"])
        assert list(z[f"{i}/source"]) == tok.encode(lines[i]).tokens
        assert z[f"{i}/cross"].shape == (1, 1, T, S)  # one decoder, one head
        _rows_sum_to_one(z[f"{i}/cross"])
        # the teacher-forced pass gives the α of decoding
        np.testing.assert_allclose(z[f"{i}/cross"][0].mean(0), maps[i][0].numpy(), atol=1e-5)
        assert "encoder_self" not in z.files
    assert z["1/source"].shape == (0,) and "1/cross" not in z.files


def test_save_attention_transformer_every_layer_and_head(mt_runs, tmp_path):
    run = mt_runs["mt_transformer"]
    lines = ["Eine Frau liest ein Buch.", "Drei Männer laufen."]
    out = tmp_path / "attn.npz"
    assert main([str(run), *lines, "--save-attention", str(out), "--beam", "2"]) == 0
    z = np.load(out)
    model, dm, _ = mt.load(run)
    _, maps = mt.translate(model, dm, lines, beam=2, need_weights=True)
    for i, line in enumerate(lines):
        S = min(len(dm.src_tok.encode(line).ids), dm.max_src_len)  # sources are cut to the limit
        T = len(z[f"{i}/output"])
        assert z[f"{i}/encoder_self"].shape == (2, 2, S, S)  # layers, heads
        assert z[f"{i}/decoder_self"].shape == (2, 2, T, T)
        assert z[f"{i}/cross"].shape == (2, 2, T, S)
        for key in ("encoder_self", "decoder_self", "cross"):
            _rows_sum_to_one(z[f"{i}/{key}"])
        assert np.all(np.triu(z[f"{i}/decoder_self"], k=1) == 0)  # causal: nothing from the future
        # the last layer's encoder–decoder attention is what beam search recorded
        np.testing.assert_allclose(z[f"{i}/cross"][-1].mean(0), maps[i][0].numpy(), atol=1e-5)


def test_failures_are_one_message_and_status_2(mt_runs, tmp_path, capsys):
    run = mt_runs["mt_rnnsearch"]
    cut = tmp_path / "cut"
    shutil.copytree(run, cut)
    data = (run / "checkpoints" / "last.ckpt").read_bytes()
    (cut / "checkpoints" / "last.ckpt").write_bytes(data[: len(data) // 2])
    assert main([str(cut), "x"]) == 2
    assert "corrupt or truncated" in capsys.readouterr().err
    (cut / "checkpoints" / "last.ckpt").write_bytes(b"")
    assert main([str(cut), "x"]) == 2
    assert "the file is empty" in capsys.readouterr().err
    torch.save({"state_dict": {}}, cut / "checkpoints" / "last.ckpt")  # another program's
    (cut / "checkpoints" / "last.ckpt.sha256").unlink()  # (which writes no digest)
    (cut / "config.yaml").unlink()
    assert main([str(cut), "x"]) == 2
    assert "is not an attnflow run" in capsys.readouterr().err
    graph = fabricate_run(GRAPH, tmp_path / "graph")
    assert main([str(graph), "x"]) == 2
    assert "not a translation run" in capsys.readouterr().err
    assert main([str(run), "x", "--save-attention", str(tmp_path / "a.txt")]) == 2
    assert ".npz" in capsys.readouterr().err
    for option, name in (("--save-attention", "a.npz"), ("--attention", "a.png")):  # kept as they are
        (tmp_path / name).write_text("earlier\n")
        assert main([str(run), "x", option, str(tmp_path / name)]) == 2
        assert f"{option} {tmp_path / name} exists and is not overwritten" in capsys.readouterr().err
        assert (tmp_path / name).read_text() == "earlier\n"
    for option in ("--max-len", "--beam", "--batch-size"):  # 0 is refused, not read as "default"
        with pytest.raises(SystemExit) as exc:
            main([str(run), "x", option, "0"])
        assert exc.value.code == 2
        assert f"argument {option}: must be >= 1, got 0" in capsys.readouterr().err
    # matplotlib refused another suffix only after decoding: now before, and nothing is written
    assert main([str(run), "x", "--attention", str(tmp_path / "alpha.txt")]) == 2
    out = capsys.readouterr()
    assert "--attention takes the PNG file to write (--attention OUT.png)" in out.err and not out.out
    assert not (tmp_path / "alpha.txt").exists()


@pytest.mark.slow
def test_heat_maps_never_overwrite_a_file(mt_runs, tmp_path, capsys):
    """--attention x.png writes x_1.png, x_2.png, … for the later sentences; only x.png was
    checked, and an existing x_2.png was overwritten. With sentences as arguments every name is
    checked before decoding (a blank sentence has no map); with -f before the first is written."""
    run, base, taken = mt_runs["mt_rnnsearch"], tmp_path / "x.png", tmp_path / "x_2.png"
    lines = ["Ein Mann schläft.", "Zwei Hunde spielen.", "Ein Kind lacht."]
    taken.write_text("earlier\n")
    assert main([str(run), *lines, "--attention", str(base)]) == 2
    cap = capsys.readouterr()
    assert cap.out == "" and cap.err == (f"attnflow-translate: --attention {taken} exists and is not "
                                         f"overwritten: give another name, or remove it first\n")
    listing = tmp_path / "in.de"
    listing.write_text("".join(line + "\n" for line in lines))
    assert main([str(run), "-f", str(listing), "--attention", str(base)]) == 2
    cap = capsys.readouterr()
    assert len(cap.out.splitlines()) == 3 and f"--attention {taken} exists" in cap.err
    assert taken.read_text() == "earlier\n" and not base.exists()
    assert main([str(run), lines[0], "", lines[1], "--attention", str(base)]) == 0  # two maps
    assert sorted(p.name for p in tmp_path.glob("x*.png")) == ["x.png", "x_1.png", "x_2.png"]
    assert taken.read_text() == "earlier\n"


def test_outputs_under_a_file_are_refused_before_decoding(mt_runs, tmp_path, capsys):
    run, f = mt_runs["mt_rnnsearch"], tmp_path / "f.txt"
    f.write_text("Zwei Hunde spielen.\n")
    for option, name in (("--attention", "x.png"), ("--save-attention", "x.npz")):
        assert main([str(run), "Ein Mann schläft.", option, str(f / name)]) == 2  # was: after decoding
        cap = capsys.readouterr()
        assert cap.out == "" and cap.err == (f"attnflow-translate: {option} {f / name}: {f} is a file, "
                                             f"not a folder; name a file in a folder\n")
    assert f.read_text() == "Zwei Hunde spielen.\n"


def test_a_file_given_with_sentences_is_one_warning(mt_runs, tmp_path, capsys):
    listing = tmp_path / "in.de"
    listing.write_text("Zwei Hunde spielen.\nEin Kind lacht.\n")
    assert main([str(mt_runs["mt_rnnsearch"]), "Ein Mann schläft.", "-f", str(listing)]) == 0
    cap = capsys.readouterr()
    assert len(cap.out.splitlines()) == 1 and cap.err == (
        f"attnflow: warning: -f {listing} is unread: inputs are given as arguments\n")


def test_a_checkpoint_copied_out_of_its_run_translates_with_the_tokenizers_it_carries(mt_runs, tmp_path, capsys):
    run = mt_runs["mt_transformer"]
    lines = ["Ein Mann schläft.", "Zwei Hunde spielen im Schnee."]
    assert main([str(run), *lines]) == 0
    want = capsys.readouterr().out
    alone = tmp_path / "copied.ckpt"  # no run folder around it: no tokenizer/, no config.yaml
    shutil.copy(run / "checkpoints" / "last.ckpt", alone)
    assert main([str(alone), *lines]) == 0
    assert capsys.readouterr().out == want
    ckpt = torch.load(alone, map_location="cpu", weights_only=True)
    del ckpt["attnflow_artifacts"]  # a checkpoint written before checkpoints carried them
    torch.save(ckpt, alone)
    assert main([str(alone), "x"]) == 2
    err = capsys.readouterr().err
    assert "no tokenizer file" in err and "carries no tokenizers" in err


@pytest.mark.slow
def test_an_ensemble_of_runs_decodes_as_one(mt_runs, tmp_path, capsys):
    from attnflow.models.ensemble import Ensemble

    run = mt_runs["mt_transformer"]
    lines = ["Ein Mann schläft.", "Zwei Hunde spielen im Schnee.", "Ein Kind lacht."]
    assert main([str(run), *lines, "--beam", "3"]) == 0
    alone = capsys.readouterr().out
    # a model with itself: the mean of two equal distributions is that distribution
    assert main([str(run), *lines, "--beam", "3", "--ensemble", str(run)]) == 0
    assert capsys.readouterr().out == alone
    # another Transformer (other weights, one layer each side) on the same tokenizer, as a checkpoint
    data = Path(yaml.safe_load((run / "config.yaml").read_text())["data"]["root"])
    second = fabricate_run(translation_overrides(data, "mt_transformer")
                           + ["model.encoder_layers=1", "model.decoder_layers=1"], tmp_path / "b", seed=1)
    ckpt = second / "checkpoints" / "last.ckpt"
    assert main([str(run), "--ensemble", str(ckpt), "--beam", "3", *lines]) == 0
    got = capsys.readouterr().out.splitlines()
    a, dm, _ = mt.load(run)
    b, _, _ = mt.load(ckpt)
    want, _ = mt.translate(Ensemble([a, b]).eval(), dm, lines, beam=3)
    assert got == want
    # refused before any work: another tokenizer; an attention map is one warning, not written
    other = fabricate_run(translation_overrides(parallel_files(tmp_path / "d2"), "mt_transformer")
                          + ["data.vocab_size=70"], tmp_path / "other")
    assert main([str(run), "x", "--ensemble", str(other)]) == 2
    err = capsys.readouterr().err
    assert f"--ensemble {other}: its source tokenizer differs" in err
    for option in ("--attention", "--save-attention"):
        assert main([str(run), *lines, "--beam", "3", "--ensemble", str(run), option,
                     str(tmp_path / "a.npz")]) == 0
        out, err = capsys.readouterr()
        assert out == alone and err.splitlines()[0] == (
            "attnflow: warning: --attention and --save-attention are not read with --ensemble: an "
            "ensemble has no one attention map")
    assert not (tmp_path / "a.npz").exists()


@pytest.mark.slow
def test_defaults_are_the_runs_own_test_decoding_and_options_override(mt_runs, tmp_path, capsys, monkeypatch):
    """Without --beam / --length-penalty / --max-len a run decodes as its test step did (its
    task.beam_size, task.length_penalty, data.max_decode_len); given, they win. An ensemble
    decodes as its first run; a member that decoded otherwise is one warning."""
    data = Path(yaml.safe_load((mt_runs["mt_transformer"] / "config.yaml").read_text())["data"]["root"])
    run = fabricate_run(translation_overrides(data, "mt_transformer")
                        + ["task.beam_size=3", "task.length_penalty=1.5"], tmp_path / "beam3")
    seen = []
    decode_ids = mt.decode_ids

    def spy(model, ids, beam, length_penalty, max_len, **kw):
        seen.append((beam, length_penalty, max_len))
        return decode_ids(model, ids, beam, length_penalty, max_len, **kw)

    monkeypatch.setattr(mt, "decode_ids", spy)
    lines = ["Ein Mann schläft.", "Zwei Hunde spielen im Schnee.", "Ein Kind lacht."]
    max_len = mt.load(run)[1].max_decode_len
    assert main([str(run), *lines]) == 0
    default = capsys.readouterr().out
    assert seen.pop() == (3, 1.5, max_len)
    assert main([str(run), *lines, "--beam", "3", "--length-penalty", "1.5"]) == 0
    assert capsys.readouterr().out == default
    assert seen.pop() == (3, 1.5, max_len)
    assert main([str(run), *lines, "--beam", "1", "--length-penalty", "0.6", "--max-len", "4"]) == 0
    assert seen.pop() == (1, 0.6, 4)
    capsys.readouterr()
    # a run that left the fields unset decodes with the translation task's defaults (beam 4, α 0.6)
    plain = fabricate_run([o for o in translation_overrides(data, "mt_transformer")
                           if not o.startswith("task.beam_size")], tmp_path / "plain")
    assert main([str(plain), "x"]) == 0
    assert seen.pop()[:2] == (4, 0.6)
    # an ensemble: the first run's settings; a member that decoded otherwise is one warning
    assert main([str(run), "x", "--ensemble", str(run)]) == 0
    assert seen.pop()[:2] == (3, 1.5)
    assert capsys.readouterr().err == ""
    other = mt_runs["mt_transformer"]  # task.beam_size=1, α 0.6
    assert main([str(run), "x", "--ensemble", str(other)]) == 0
    assert seen.pop()[:2] == (3, 1.5)
    assert capsys.readouterr().err == (
        f"attnflow: warning: --ensemble {other} (task.beam_size 1), {other} (task.length_penalty "
        f"0.6): not read; the first run's decoding applies (beam 3, length penalty 1.5; --beam and "
        f"--length-penalty choose)\n")
    assert main([str(run), "x", "--ensemble", str(other), "--beam", "2", "--length-penalty", "1"]) == 0
    assert seen.pop()[:2] == (2, 1.0)
    assert capsys.readouterr().err == ""
