"""attnflow-export: BERT runs as Hugging Face directories that transformers' Auto classes load with
the run's tokenization and outputs, and ONNX files of each classifier family and the Transformer
encoder that onnxruntime runs as attnflow does, on inputs of other sizes than the traced ones."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from attnflow.cli.export import main
from attnflow.config.registry import MODELS
from attnflow.io.checkpoints import load_run
from attnflow.io.weights import atomic_torch_save
from cli_runs import (GRAPH, QUIET, document_files, document_overrides, fabricate_run,  # noqa: F401
                      one_torch_thread, parallel_files, translation_overrides, write_jsonl)

transformers = pytest.importorskip("transformers")
TINY = ["model.d_model=16", "model.layers=2", "model.ffn_dim=32", "attention.heads=2",
        "data.vocab_size=120", "model.dropout=0.0", "attention.dropout=0.0"]
WORDS = "the film was a and it story acting plot good great bad awful dull".split()
TEXTS = ["the film was great, and the acting good.", "a dull story", "plot"]


def jitter(run):
    """Move every weight off its initial value (zero biases, unit LayerNorm gains), so a
    tensor exported under the wrong name shows in the outputs."""
    path = run / "checkpoints" / "last.ckpt"
    ckpt = torch.load(path, weights_only=True)
    gen = torch.Generator().manual_seed(0)
    for k, v in ckpt["state_dict"].items():
        if v.is_floating_point():
            v.add_(torch.randn(v.shape, generator=gen) * 0.1)
    atomic_torch_save(ckpt, path)  # (as attnflow writes it: with its digest)
    return run


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("export_runs")
    rng = random.Random(0)
    rows = [{"text": " ".join(rng.choice(WORDS) for _ in range(8)) + ".", "label": ["neg", "pos"][i % 2]}
            for i in range(40)]
    write_jsonl(base / "train.jsonl", rows)
    (base / "corpus.txt").write_text("".join(f"{r['text']} {r['text']}\n" for r in rows))
    docs = document_files(base / "docs")
    return {
        "sequence": fabricate_run(["experiment=bert_imdb", f"data.train_path={base}/train.jsonl",
                                   f"data.val_path={base}/train.jsonl", "data.test_path=",
                                   "data.max_len=24", "data.labels=[neg,pos]", *TINY, *QUIET], base / "seq"),
        "pretraining": fabricate_run(["experiment=bert_pretrain_imdb", f"data.train_path={base}/corpus.txt",
                                      f"data.val_path={base}/corpus.txt", "data.max_len=24", *TINY,
                                      *QUIET], base / "pre"),
        "token": fabricate_run(["experiment=bert_tokens", "data.train_size=40", "data.val_size=10",
                                "data.test_size=0", "data.max_len=24", *TINY, *QUIET], base / "tok"),
        "han": fabricate_run(document_overrides(docs), base / "han"),
        "gat": fabricate_run(GRAPH, base / "gat"),
        "transformer": fabricate_run(translation_overrides(parallel_files(base / "mt"), "mt_transformer"),
                                     base / "mt"),
    }


def attnflow_bert(run):
    from attnflow.inference.texts import encode, load_bert

    bert = load_bert(load_run(run))
    return bert, [it["ids"].tolist() for it in encode(bert, TEXTS)]


def padded(rows):
    T = max(map(len, rows))
    ids = torch.tensor([r + [0] * (T - len(r)) for r in rows])
    return ids, torch.zeros_like(ids), ids != 0


@pytest.mark.slow
def test_a_sequence_classifier_loads_in_transformers_with_equal_tokens_and_logits(runs, tmp_path):
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    run = jitter(runs["sequence"])
    assert main([str(run), "--to", "hf", str(tmp_path / "hf")]) == 0
    hf, info = AutoModelForSequenceClassification.from_pretrained(tmp_path / "hf", output_loading_info=True)
    assert not any(info.values()), info  # every tensor used, none left over
    hf.eval()
    tok = AutoTokenizer.from_pretrained(tmp_path / "hf")
    bert, rows = attnflow_bert(run)
    assert tok(TEXTS)["input_ids"] == rows  # [CLS] subwords [SEP], as the run encodes
    assert hf.config.id2label == {0: "neg", 1: "pos"}
    ids, seg, mask = padded(rows)
    with torch.no_grad():
        want = bert.model.classify_logits(bert.model(ids, seg, mask))
        got = hf(input_ids=ids, token_type_ids=seg, attention_mask=mask.long()).logits
    print(f"\nhf sequence logits: max |Δ| = {(got - want).abs().max():.1e}")  # (-s)
    assert torch.allclose(got, want, atol=1e-5), (got - want).abs().max()


@pytest.mark.slow
def test_a_token_classifier_loads_in_transformers_with_equal_logits(runs, tmp_path):
    from transformers import AutoModelForTokenClassification

    run = jitter(runs["token"])
    assert main([str(run), "--to", "hf", str(tmp_path / "hf")]) == 0
    hf, info = AutoModelForTokenClassification.from_pretrained(tmp_path / "hf", output_loading_info=True)
    assert not any(info.values()), info  # every tensor used, none left over (no pooler)
    hf.eval()
    bert, rows = attnflow_bert(run)
    assert list(hf.config.id2label.values()) == bert.class_names and bert.class_names[0] == "O"
    ids, seg, mask = padded(rows)
    with torch.no_grad():
        want = bert.model.token_logits(bert.model(ids, seg, mask))
        got = hf(input_ids=ids, token_type_ids=seg, attention_mask=mask.long()).logits
    print(f"\nhf token logits: max |Δ| = {(got - want)[mask].abs().max():.1e}")  # (-s)
    assert torch.allclose(got[mask], want[mask], atol=1e-5), (got - want)[mask].abs().max()


@pytest.mark.slow
def test_a_pretraining_run_round_trips_through_hf(runs, tmp_path):
    """Exported, BertForPreTraining gives the run's MLM and NSP logits; imported again
    (model.init_from=hf:…), attnflow gives them too."""
    from transformers import BertForPreTraining

    run = jitter(runs["pretraining"])
    assert main([str(run), "--to", "hf", str(tmp_path / "hf")]) == 0
    hf, info = BertForPreTraining.from_pretrained(tmp_path / "hf", output_loading_info=True)
    assert not any(info.values()), info
    hf.eval()
    bert, rows = attnflow_bert(run)
    ids, seg, mask = padded(rows)
    from attnflow.models import bert_hf

    back = MODELS.build({"name": "bert", **bert_hf.architecture(tmp_path / "hf"),
                         "init_from": f"hf:{tmp_path / 'hf'}"}, vocab_size=len(bert.itos)).eval()
    with torch.no_grad():
        h = bert.model(ids, seg, mask)
        out = hf(input_ids=ids, token_type_ids=seg, attention_mask=mask.long())
        again = back(ids, seg, mask)
        print(f"\nhf pretraining: MLM max |Δ| = {(out.prediction_logits - bert.model.mlm_logits(h))[mask].abs().max():.1e}, "
              f"NSP {(out.seq_relationship_logits - bert.model.nsp_logits(h)).abs().max():.1e}; "
              f"back: hidden {(again - h)[mask].abs().max():.1e}")  # (-s)
        assert torch.allclose(out.prediction_logits[mask], bert.model.mlm_logits(h)[mask], atol=1e-5)
        assert torch.allclose(out.seq_relationship_logits, bert.model.nsp_logits(h), atol=1e-5)
        assert torch.allclose(again[mask], h[mask], atol=1e-6)


@pytest.mark.parametrize("run, what", [
    ("gat", "'gat' run on graph; --to hf exports BERT runs"),
    ("sequence", "exists and is not overwritten"),
])
@pytest.mark.slow
def test_refusals_are_one_line(runs, tmp_path, capsys, run, what):
    out = tmp_path / "out"
    if what.startswith("exists"):
        out.mkdir()
    assert main([str(runs[run]), "--to", "hf", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert what in err and "\n" not in err
    assert [p.name for p in tmp_path.iterdir()] == (["out"] if what.startswith("exists") else [])


def test_a_setting_hf_lacks_is_refused_naming_it(runs, tmp_path, capsys):
    run = tmp_path / "pre_ln"  # the sequence run as if trained with pre-LN
    ckpt = torch.load(runs["sequence"] / "checkpoints" / "last.ckpt", weights_only=True)
    ckpt["attnflow_config"]["model"]["norm"] = "pre"
    ckpt["state_dict"]["model.encoder.final_norm.weight"] = torch.ones(16)
    ckpt["state_dict"]["model.encoder.final_norm.bias"] = torch.zeros(16)
    (run / "checkpoints").mkdir(parents=True)
    atomic_torch_save(ckpt, run / "checkpoints" / "last.ckpt")
    (run / "tokenizer").mkdir()
    (run / "tokenizer" / "wordpiece.json").write_bytes(
        (runs["sequence"] / "tokenizer" / "wordpiece.json").read_bytes())
    assert main([str(run), "--to", "hf", str(tmp_path / "hf")]) == 2
    assert "model.norm=pre: Hugging Face's BERT has post" in capsys.readouterr().err
    assert not (tmp_path / "hf").exists()


def _inputs(kind, model, gen):
    """Inputs of other sizes than the exporter's example."""
    if kind in ("sequence", "token"):
        ids = torch.randint(5, model.token_embedding.num_embeddings, (3, 11), generator=gen)
        ids[1, 7:] = 0
        ids[2, 4:] = 0
        return {"input_ids": ids, "token_type_ids": torch.zeros_like(ids), "attention_mask": (ids != 0).long()}
    if kind == "han":
        tokens = torch.randint(2, model.embedding.num_embeddings, (3, 5, 7), generator=gen)
        lengths = torch.tensor([[7, 3, 0, 0, 0], [2, 6, 5, 1, 7], [1, 0, 0, 0, 0]])
        tokens[torch.arange(7) >= lengths[..., None]] = 0
        return {"tokens": tokens, "sent_lengths": lengths}
    if kind == "gat":
        return {"x": torch.randn(37, model.in_dim, generator=gen),
                "edge_index": torch.randint(0, 37, (2, 120), generator=gen)}
    src = torch.randint(4, model.src_embedding.num_embeddings, (3, 9), generator=gen)
    lengths = torch.tensor([9, 5, 2])
    src[torch.arange(9) >= lengths[:, None]] = 0
    return {"src": src, "src_lengths": lengths}


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["sequence", "token", "han", "gat", "transformer"])
def test_onnx_files_compute_what_attnflow_computes(runs, tmp_path, kind, capsys):
    ort = pytest.importorskip("onnxruntime")
    from attnflow.inference import export
    from attnflow.inference.runs import run_interface

    path = tmp_path / f"{kind}.onnx"
    assert main([str(runs[kind]), "--to", "onnx", str(path)]) == 0
    assert "onnxruntime on the traced example: max |Δ| = " in capsys.readouterr().err
    fn, example, axes, model = export.EXAMPLES[run_interface(load_run(runs[kind]))](load_run(runs[kind]))
    feeds = _inputs(kind, model, torch.Generator().manual_seed(1))
    assert all(feeds[n].shape != e.shape for n, e in zip(feeds, example) if n != "edge_index")
    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    got = session.run(None, {n: t.numpy() for n, t in feeds.items()})[0]
    with torch.no_grad():
        want = fn(*feeds.values()).numpy()
    print(f"\nonnx {kind}: max |Δ| = {np.abs(got - want).max():.1e} on {tuple(got.shape)}")  # (-s)
    assert got.shape == want.shape and np.abs(got - want).max() <= 1e-4, np.abs(got - want).max()


@pytest.mark.slow
@pytest.mark.parametrize("kind, auto", [("sequence", "AutoModelForSequenceClassification"),
                                        ("token", "AutoModelForTokenClassification")])
def test_a_bert_onnx_file_takes_what_an_hf_tokenizer_gives(runs, tmp_path, kind, auto):
    """Hugging Face's convention: the tokenizer's ``input_ids``, ``token_type_ids`` and int64
    ``attention_mask`` feed the ONNX file as they come, and it computes the logits that
    transformers' model of the same run computes."""
    ort = pytest.importorskip("onnxruntime")
    from transformers import AutoTokenizer

    run = jitter(runs[kind])
    assert main([str(run), "--to", "hf", str(tmp_path / "hf")]) == 0
    assert main([str(run), "--to", "onnx", str(tmp_path / "m.onnx")]) == 0
    feeds = dict(AutoTokenizer.from_pretrained(tmp_path / "hf")(TEXTS, padding=True, return_tensors="np"))
    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(str(tmp_path / "m.onnx"), options, providers=["CPUExecutionProvider"])
    assert [(i.name, i.type) for i in session.get_inputs()] == [(n, "tensor(int64)") for n in feeds]
    got = session.run(None, feeds)[0]
    hf = getattr(transformers, auto).from_pretrained(tmp_path / "hf").eval()
    with torch.no_grad():
        want = hf(**{k: torch.from_numpy(v) for k, v in feeds.items()}).logits.numpy()
    keep = feeds["attention_mask"].astype(bool) if kind == "token" else slice(None)
    assert got.shape == want.shape and np.abs(got - want)[keep].max() <= 1e-4


def test_a_missing_run_is_one_line_exit_status_2_and_writes_nothing(tmp_path, capsys):
    for to, out in (("hf", tmp_path / "hf"), ("onnx", tmp_path / "model.onnx")):
        assert main([str(tmp_path / "nowhere"), "--to", to, str(out)]) == 2
        err = capsys.readouterr().err
        assert err == f"attnflow-export: no such run directory or checkpoint: {tmp_path / 'nowhere'}\n"
        assert not out.exists()
