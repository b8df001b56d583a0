"""attnflow-predict for every family: documents (empty and over-long inputs, '\\n'-only JSON
lines, gzip, streaming, attention as data) and graph nodes (CSV of labels and probabilities, top
neighbours, GAT α per edge); failures are one message and status 2."""

from __future__ import annotations

import csv
import gzip
import json
import shutil

import numpy as np
import pytest
import torch

import attnflow.inference.runs as runs_mod
import attnflow.cli.predict_io as predict_io
from attnflow.cli.predict import main
from cli_runs import (GRAPH, assert_streams, document_files, document_overrides, fabricate_run,
                      parallel_files, translation_overrides, write_jsonl)
# one_torch_thread: an autouse fixture, in effect by being imported


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Untrained HAN and self-attentive runs (caps: 4 sentences of 6 words) and a GAT run."""
    base = tmp_path_factory.mktemp("predict_runs")
    docs = document_files(base / "docs")
    return {"han": fabricate_run(document_overrides(docs), base / "han"),
            "self_attentive": fabricate_run(document_overrides(docs, "self_attentive_imdb"),
                                            base / "self_attentive"),
            "gat": fabricate_run(GRAPH, base / "gat")}


def _out(capsys):
    cap = capsys.readouterr()
    return cap.out.split("\n")[:-1], cap.err


# -- documents ------------------------------------------------------------------------------------
@pytest.mark.slow
def test_blank_and_empty_documents_keep_output_aligned_with_input(runs, tmp_path, capsys):
    f = tmp_path / "docs.txt"
    f.write_text("A good film.\n\n   \n<br />\nA bad film.\n")
    assert main([str(runs["han"]), "--file", str(f)]) == 0
    out, err = _out(capsys)
    assert len(out) == 5  # one line per input line
    assert out[1] == out[2] == out[3] == "-\t-\t(empty: no words)"
    assert all(line.split("\t")[0] in ("0", "1") for line in (out[0], out[4]))
    for n in (2, 3, 4):
        assert f"docs.txt line {n} is empty: no words to classify" in err
    assert main([str(runs["han"]), "", "--json"]) == 0  # an empty argument, JSON
    out, _ = _out(capsys)
    assert json.loads(out[0]) == {"label": None, "probability": None, "probabilities": None,
                                  "text": "", "empty": True}


@pytest.mark.slow
def test_documents_over_the_caps_are_cut_with_a_warning_counting_what_was_cut(runs, capsys):
    long_doc = " ".join(["w " * 9 + "."] * 500)  # 500 sentences of 10 words ('.' is one)
    assert main([str(runs["han"]), "A good film.", long_doc]) == 0
    out, err = _out(capsys)
    assert len(out) == 2
    # the run's caps are 4 sentences of 6 words: 24 of 5000 words are read
    assert "argument 2 has 500 sentences and 5000 words" in err
    assert "496 sentences and 4976 of 5000 words cut" in err
    assert "argument 1 " not in err and "1 of 2 documents were longer" in err


@pytest.mark.slow
def test_json_lines_split_on_newline_only_and_gzip(runs, tmp_path, capsys):
    texts = ["A good\u2028film. Great acting.", "Bad\x85plot, boring.", "A wonderful\u2029story."]
    rows = [{"text": texts[0], "label": 1}, {"text": texts[1]}, {"text": texts[2], "id": 7}]
    plain = write_jsonl(tmp_path / "docs.jsonl", rows)
    with plain.open("a") as f:  # a blank line is an empty document, not a skipped one
        f.write("\n")
    assert main([str(runs["han"]), *texts, "--json"]) == 0
    by_args, _ = _out(capsys)
    assert main([str(runs["han"]), "--file", str(plain), "--json"]) == 0
    by_file, _ = _out(capsys)
    assert by_file[:3] == by_args and json.loads(by_file[3])["empty"] is True
    packed = tmp_path / "docs.jsonl.gz"
    with gzip.open(packed, "wb") as g:
        g.write(plain.read_bytes())
    assert main([str(runs["han"]), "--file", str(packed), "--json"]) == 0
    assert _out(capsys)[0] == by_file
    txt = tmp_path / "docs.txt.gz"
    with gzip.open(txt, "wt", encoding="utf-8") as g:
        g.write("\n".join(texts) + "\n")
    assert main([str(runs["han"]), "--file", str(txt), "--json"]) == 0
    assert _out(capsys)[0] == by_args


@pytest.mark.slow
def test_output_streams_batch_by_batch(runs, monkeypatch):
    assert_streams(monkeypatch, predict_io, main, [str(runs["han"])], "A good film.")


@pytest.mark.slow
def test_save_attention_han_word_and_sentence_weights(runs, tmp_path, capsys):
    texts = ["Good great film was fine. Bad plot.", "", "Dull story, really dull."]
    out = tmp_path / "han.npz"
    assert main([str(runs["han"]), *texts, "--save-attention", str(out)]) == 0
    z = np.load(out)
    assert str(z["kind"]) == "documents" and int(z["lines"]) == 3
    assert z["0/words"].tolist() == [["good", "great", "film", "was", "fine", "."],
                                     ["bad", "plot", ".", "", "", ""]]
    assert z["2/words"].tolist() == [["dull", "story", ",", "really", "dull", "."]]
    for i in (0, 2):
        ww, real = z[f"{i}/word_weights"], z[f"{i}/words"] != ""
        assert ww.shape == real.shape
        np.testing.assert_allclose(ww.sum(-1), 1.0, atol=1e-5)  # each sentence's words
        assert np.all(ww[~real] == 0)
        np.testing.assert_allclose(z[f"{i}/sent_weights"].sum(), 1.0, atol=1e-5)
        assert z[f"{i}/sent_weights"].shape == (real.shape[0],)
    assert z["1/words"].shape == (0, 0) and "1/word_weights" not in z.files


@pytest.mark.slow
def test_save_attention_self_attentive_hops(runs, tmp_path, capsys):
    out = tmp_path / "sa.npz"
    assert main([str(runs["self_attentive"]), "Good great film was fine. Bad plot.",
                 "--save-attention", str(out)]) == 0
    z = np.load(out)
    hops = z["0/hops"]
    assert hops.shape == (3, 9)  # r = 3 hops over the 6 + 3 words read
    np.testing.assert_allclose(hops.sum(-1), 1.0, atol=1e-5)
    np.testing.assert_allclose(z["0/word_weights"].sum(), 1.0, atol=1e-5)  # mean of the hops
    assert "0/sent_weights" not in z.files


# -- graphs -----------------------------------------------------------------------------------------
def _rebuild_gat(run):
    from attnflow.config.registry import DATA, MODELS

    ckpt = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    cfg = ckpt["attnflow_config"]
    dm = DATA.build(cfg["data"])
    model = MODELS.build(cfg["model"], **dm.model_context())
    model.load_state_dict({k[6:]: v for k, v in ckpt["state_dict"].items() if k.startswith("model.")})
    return model.eval(), dm.full_graph()


@pytest.mark.slow
def test_gat_nodes_labels_probabilities_and_top_neighbours(runs, tmp_path, capsys):
    run = runs["gat"]
    out, npz = tmp_path / "nodes.csv", tmp_path / "gat.npz"
    assert main([str(run), "-o", str(out), "--explain", "--top-k", "2",
                 "--save-attention", str(npz)]) == 0
    rows = list(csv.DictReader(out.open()))
    model, graph = _rebuild_gat(run)
    with torch.no_grad():
        probs = torch.softmax(model(graph.x, graph.edge_index), -1).numpy()
    N, C = probs.shape
    assert len(rows) == N and list(rows[0]) == ["node", "label", "prob",
                                                *(f"prob_{c}" for c in range(C)), "neighbours"]
    got = np.array([[float(r[f"prob_{c}"]) for c in range(C)] for r in rows])
    np.testing.assert_allclose(got, probs, atol=1e-4)
    assert [int(r["label"]) for r in rows] == probs.argmax(-1).tolist()
    np.testing.assert_allclose([float(r["prob"]) for r in rows], probs.max(-1), atol=1e-4)

    z = np.load(npz)
    assert str(z["kind"]) == "graph" and int(z["num_nodes"]) == N
    for layer, heads in ((0, 8), (1, 1)):  # gat_synthetic: 8 hidden heads, 1 output head
        ei, alpha = z[f"layer{layer}/edge_index"], z[f"layer{layer}/alpha"]
        assert ei.shape[0] == 2 and alpha.shape == (ei.shape[1], heads)
        sums = np.zeros((N, heads))
        np.add.at(sums, ei[1], alpha)  # over the edges into each node
        np.testing.assert_allclose(sums, 1.0, atol=1e-5)
    ei, a = z["layer1/edge_index"], z["layer1/alpha"].mean(-1)
    for t in range(N):
        into = np.flatnonzero(ei[1] == t)
        best = into[np.argsort(-a[into], kind="stable")[:2]]
        listed = [p.split(":") for p in rows[t]["neighbours"].split()]
        assert [int(i) for i, _ in listed] == ei[0, best].tolist()
        np.testing.assert_allclose([float(w) for _, w in listed], a[best], atol=1e-4)


@pytest.mark.slow
def test_an_explain_file_of_a_graph_run_is_one_warning(runs, tmp_path, capsys):
    out, plain = tmp_path / "nodes.csv", tmp_path / "plain.csv"
    assert main([str(runs["gat"]), "--explain", "-o", str(plain)]) == 0
    assert main([str(runs["gat"]), "--explain", "x.html", "-o", str(out)]) == 0
    assert capsys.readouterr().err == ("attnflow: warning: --explain x.html is unread: a graph run "
                                       "adds the neighbours column to the CSV\n")
    assert out.read_text() == plain.read_text() and "neighbours" in out.read_text()
    assert main([str(runs["han"]), "--explain"]) == 2
    assert "--explain OUT.html" in capsys.readouterr().err


@pytest.mark.slow
def test_options_a_graph_run_leaves_unread_are_one_warning(runs, tmp_path, capsys):
    out, plain = tmp_path / "nodes.csv", tmp_path / "plain.csv"
    assert main([str(runs["gat"]), "-o", str(plain)]) == 0
    capsys.readouterr()
    args = [str(runs["gat"]), "some text", "--json", "--batch-size", "7", "--top-k", "3",
            "-o", str(out)]
    assert main(args) == 0
    assert capsys.readouterr().err == (
        f"attnflow: warning: texts and --file, --json, --batch-size, --top-k (without --explain): "
        f"not read for the run at {runs['gat']}, which works on graph\n")
    assert out.read_text() == plain.read_text()


@pytest.mark.parametrize("run, option, name", [("gat", "-o", "nodes.csv"), ("gat", "--save-attention", "a.npz"),
                                               ("han", "--explain", "words.html")])
@pytest.mark.slow
def test_an_existing_output_file_is_refused_before_any_work_and_kept(runs, tmp_path, capsys, run, option, name):
    out = tmp_path / name
    out.write_text("earlier results\n")
    argv = [str(runs[run]), option, str(out)] + (["a good film"] if run == "han" else [])
    assert main(argv) == 2
    assert f"{option} {out} exists and is not overwritten" in capsys.readouterr().err
    assert out.read_text() == "earlier results\n"


@pytest.mark.slow
def test_outputs_named_twice_or_under_a_file_are_refused_before_any_work(runs, tmp_path, capsys,
                                                                        monkeypatch):
    """Two options naming one file wrote both to it (the explanation lost) or failed renaming a
    temporary file after the work; a path under a file was mkdir's traceback. Each is one line
    before the run is even read."""
    def no_work(*args, **kwargs):
        raise AssertionError("the run was read")

    monkeypatch.setattr(runs_mod, "load_run", no_work)
    f = tmp_path / "f.txt"
    f.write_text("hi\n")
    page, npz = tmp_path / "b" / "s.html", tmp_path / "b" / "g.npz"
    cases = [(["han", "A fine film.", "-o", page, "--explain", page],
              f"-o {page} and --explain {page} name the same file: give each output its own name"),
             (["gat", "-o", npz, "--save-attention", tmp_path / "b" / ".." / "b" / "g.npz"],
              "name the same file"),  # the same file, however spelt
             (["han", "A fine film.", "--explain", tmp_path / "e.html", "-o", tmp_path / "e.html"],
              "name the same file")]
    for option, name in (("-o", "x.tsv"), ("--explain", "x.html"), ("--save-attention", "x.npz"),
                         ("-o", "sub/x.tsv")):
        cases.append((["han", "A fine film.", option, f / name],
                       f"{option} {f / name}: {f} is a file, not a folder; name a file in a folder"))
    for args, says in cases:
        assert main([str(runs.get(a, a)) for a in args]) == 2, args
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and says in err, err
    assert [p.name for p in tmp_path.iterdir()] == ["f.txt"] and f.read_text() == "hi\n"


@pytest.mark.slow
def test_a_file_given_with_texts_is_one_warning(runs, tmp_path, capsys):
    docs, out = tmp_path / "docs.txt", tmp_path / "labels.tsv"
    docs.write_text("A dull film.\nA bad one.\n")
    assert main([str(runs["han"]), "A fine film.", "--file", str(docs), "-o", str(out)]) == 0
    assert capsys.readouterr().err == (f"attnflow: warning: --file {docs} is unread: inputs are "
                                       f"given as arguments\n")
    assert out.read_text().endswith("\tA fine film.\n") and out.read_text().count("\n") == 1


@pytest.mark.slow
def test_a_folder_given_as_the_file_is_named_as_a_folder(runs, tmp_path, capsys):
    """--file <folder> said "no such --file" of a path that is there."""
    folder, out = tmp_path / "docs", tmp_path / "labels.tsv"
    folder.mkdir()
    assert main([str(runs["han"]), "--file", str(folder), "-o", str(out)]) == 2
    assert capsys.readouterr().err == (f"attnflow-predict: --file {folder}: a folder, not a file; "
                                       f"name a file of one input per line\n")
    assert [p.name for p in tmp_path.iterdir()] == ["docs"]


@pytest.mark.slow
def test_an_empty_input_is_refused_naming_the_file_or_stdin(runs, tmp_path, capsys, monkeypatch):
    """--file empty.txt said "no documents given (arguments, --file or stdin)" without naming the
    file (attnflow-translate: "-f empty.txt holds no lines")."""
    out, npz = tmp_path / "labels.tsv", tmp_path / "a.npz"
    for name in ("empty.txt", "empty.jsonl"):
        empty = tmp_path / name
        empty.write_text("")
        assert main([str(runs["han"]), "--file", str(empty), "-o", str(out),
                     "--save-attention", str(npz)]) == 2
        assert capsys.readouterr().err == (f"attnflow-predict: no documents given (arguments, "
                                           f"--file or stdin): --file {empty} holds no lines\n")
        assert not out.exists() and not npz.exists()
    monkeypatch.setattr(predict_io, "iter_stdin", lambda: iter([]))
    assert main([str(runs["han"])]) == 2
    assert capsys.readouterr().err.endswith(": stdin holds no lines\n")


@pytest.mark.slow
def test_checkpoint_failures_are_one_message_and_status_2(runs, tmp_path, capsys):
    assert main([str(tmp_path / "missing")]) == 2
    assert "no such run directory or checkpoint" in capsys.readouterr().err
    cut = tmp_path / "cut"
    shutil.copytree(runs["gat"], cut)
    ckpt = cut / "checkpoints" / "last.ckpt"
    data = ckpt.read_bytes()
    ckpt.write_bytes(data[: len(data) - 100])
    assert main([str(cut)]) == 2
    assert "corrupt or truncated" in capsys.readouterr().err
    torch.save({"state_dict": {}, "epoch": 3}, ckpt)  # a Lightning checkpoint of another program
    ckpt.with_name("last.ckpt.sha256").unlink()  # (which writes no digest)
    (cut / "config.yaml").unlink()
    assert main([str(cut)]) == 2
    assert "is not an attnflow run" in capsys.readouterr().err
    mt = fabricate_run(translation_overrides(parallel_files(tmp_path / "mt")), tmp_path / "mt_run")
    assert main([str(mt), "Ein Mann."]) == 2
    assert "attnflow-translate" in capsys.readouterr().err
