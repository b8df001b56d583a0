"""attnflow-compare's views: the validation examples of real (fabricated, untrained) runs of every
family collected in one shape, each view checked against the attention the model itself returns
when run here, rows distributions over their columns, the same rows and labels in every run of
the same data, PNG pictures, and ``example_batch(ids=…)`` taking the examples asked for."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from attnflow.compare.collect import collect
from attnflow.compare.loading import load_task
from attnflow.compare.views import View, pick
from attnflow.config.registry import POOLINGS
from cli_runs import (GRAPH, QUIET, document_files, document_overrides, fabricate_run,  # noqa: F401
                      one_torch_thread, parallel_files, translation_overrides, write_jsonl)

REVERSE = ["data.train_size=200", "data.val_size=20", "data.test_size=20", *QUIET]
TRANSFORMER = ["model=transformer", "model.d_model=16", "model.ffn_dim=16", "model.encoder_layers=2",
               "model.decoder_layers=2", "attention.heads=2", "model.dropout=0.0"]
BERT = ["model.d_model=16", "model.layers=2", "model.ffn_dim=32", "attention.heads=2",
        "model.init_std=0.5", "data.vocab_size=120", "data.max_len=24", *QUIET]
CAPTIONS = ["experiment=caption_shapes", "data.train_size=16", "data.val_size=8", "data.test_size=8",
            "data.size=48", "model.encoder.channels=[8,8]", "model.decoder.embed_dim=8",
            "model.decoder.hidden_dim=16", *QUIET]
WORDS = "the film was a and it story good great bad awful plot".split()


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """One untrained run per family; two of the reverse task (RNN, Transformer) and two of the
    same documents (HAN, self-attentive), so runs of one data set can be compared."""
    base = tmp_path_factory.mktemp("compare_runs")
    docs = document_files(base / "docs")
    rng = random.Random(0)
    write_jsonl(base / "texts.jsonl", [{"text": " ".join(rng.choice(WORDS) for _ in range(8)) + ".",
                                        "label": ["neg", "pos"][i % 2]} for i in range(30)])
    specs = {"rnn": REVERSE, "transformer": [*REVERSE, *TRANSFORMER],
             "han": document_overrides(docs),
             "self_attentive": document_overrides(docs, "self_attentive_imdb"),
             "bert": ["experiment=bert_imdb", f"data.train_path={base}/texts.jsonl",
                      f"data.val_path={base}/texts.jsonl", "data.test_path=", "data.labels=[neg,pos]", *BERT],
             "tokens": ["experiment=bert_tokens", "data.train_size=20", "data.val_size=6",
                        "data.test_size=0", *BERT],
             "gat": GRAPH, "captions": CAPTIONS,
             "mt": translation_overrides(parallel_files(base / "de-en"), "mt_transformer")}
    return {name: fabricate_run(overrides, base / name, seed=i)
            for i, (name, overrides) in enumerate(specs.items())}


@pytest.fixture(scope="module")
def loaded(runs):
    """(task, data module) of every run, rebuilt as attnflow-compare rebuilds them."""
    return {name: load_task(path)[:2] for name, path in runs.items()}


def assert_distributions(view: View) -> None:
    """Every row of every head sums to 1 over its first lengths[r] columns and is 0 after."""
    H, R, C = view.weights.shape
    assert len(view.rows) == len(view.labels) == len(view.lengths) == R
    assert [len(c) for c in view.labels] == view.lengths.tolist() and view.lengths.max() == C
    inside = np.arange(C)[None, :] < view.lengths[:, None]
    np.testing.assert_allclose(np.where(inside, view.weights, 0).sum(-1), 1.0, atol=1e-5)
    assert np.all(view.weights[:, ~inside] == 0)


def assert_png(examples) -> None:
    assert all(e.picture.startswith(b"\x89PNG") and e.caption for e in examples)


def kinds(example) -> list:
    return [v.name() for v in example.views]


# -- translation and seq2seq ------------------------------------------------------------------------
def test_rnn_cross_is_the_alpha_the_model_returns(loaded):
    task, dm = loaded["rnn"]
    batch = dm.example_batch(3)
    examples = collect(task, batch)
    with torch.no_grad():
        _, alpha = task.model(batch["src"], batch["src_lengths"], batch["tgt_in"], need_weights=True)
    assert [e.key for e in examples] == ["val 0", "val 1", "val 2"]
    for i, e in enumerate(examples):
        S, T = int(batch["src_lengths"][i]), int((batch["tgt_out"][i] != task.pad_id).sum())
        assert kinds(e) == ["cross"]
        (view,) = e.views
        assert view.rows == [task.itos[t] for t in batch["tgt_out"][i, :T]] and view.rows[-1] == "<eos>"
        assert view.labels == [[task.itos[t] for t in batch["src"][i, :S]]] * T
        np.testing.assert_allclose(view.weights, alpha[i, :T, :, :S].permute(1, 0, 2).numpy(), atol=1e-6)
        assert_distributions(view)
        assert e.title == " ".join(view.labels[0]) and e.extra["reference"] == " ".join(view.rows[:-1])
    assert_png(examples)


def test_transformer_every_layer_against_the_model(loaded):
    task, dm = loaded["transformer"]
    batch = dm.example_batch(2)
    model = task.model
    with torch.no_grad():
        _, alpha = model(batch["src"], batch["src_lengths"], batch["tgt_in"], need_weights=True)
        enc = model.encoder(model.src_embedding(batch["src"]) * model.embed_scale, batch["src_lengths"],
                            need_weights=True)[2]
        first = model.decoder.layers[0]
        x = model.decoder._embed(batch["tgt_in"])
        dec_self = first.self_attn(x, x, x, None, causal=True, need_weights=True)[1]
    for i, e in enumerate(collect(task, batch)):
        S, T = int(batch["src_lengths"][i]), int((batch["tgt_out"][i] != task.pad_id).sum())
        assert kinds(e) == ["encoder_self L1", "encoder_self L2", "cross L1", "cross L2",
                            "decoder_self L1", "decoder_self L2"]
        for v in e.views:
            assert_distributions(v)
            assert v.heads == 2 and v.layers == 2
        cross, self_ = pick(e.views, "cross"), pick(e.views, "decoder_self", 0)
        np.testing.assert_allclose(cross.weights, alpha[i, :T, :, :S].permute(1, 0, 2).numpy(), atol=1e-5)
        for l in range(2):
            np.testing.assert_allclose(pick(e.views, "encoder_self", l).weights,
                                       enc[l][i, :, :S, :S].numpy(), atol=1e-5)
        np.testing.assert_allclose(self_.weights, dec_self[i, :, :T, :T].numpy(), atol=1e-5)
        # causal: row r over the decoder's inputs ⟨bos⟩ … y_r, under the row of the token it predicts
        assert self_.lengths.tolist() == list(range(1, T + 1)) and self_.labels[0] == ["<bos>"]
        assert self_.labels[1] == ["<bos>", self_.rows[0]]


def test_runs_of_the_same_data_line_up(loaded):
    """The RNN and the Transformer on the same batch: the same keys, rows and columns."""
    batch = loaded["rnn"][1].example_batch(4)
    rnn, transformer = (collect(loaded[name][0], batch) for name in ("rnn", "transformer"))
    for a, b in zip(rnn, transformer):
        assert a.key == b.key and a.title == b.title
        assert (pick(a.views, "cross").rows, pick(a.views, "cross").labels) == \
               (pick(b.views, "cross").rows, pick(b.views, "cross").labels)


def test_layer_and_head_choose_the_picture(loaded):
    task, dm = loaded["transformer"]
    batch = dm.example_batch(1, ids=[3])
    (mean,) = collect(task, batch, keys=["val 3"])
    (one,) = collect(task, batch, layer=0, head=1, keys=["val 3"])
    (past,) = collect(task, batch, layer=7, head=9, keys=["val 3"])
    assert mean.key == "val 3" and mean.picture != one.picture
    assert "layer 2 of 2, mean over 2 heads" in mean.caption and "layer 1 of 2, head 2 of 2" in one.caption
    assert "layer 2 of 2, head 2 of 2" in past.caption  # a layer or head past the last: the last
    view = pick(one.views, "cross", 0)
    np.testing.assert_allclose(view.matrix(1).numpy(), view.weights[1])
    np.testing.assert_allclose(view.matrix().numpy(), view.weights.mean(0), atol=1e-7)
    (rnn,) = collect(loaded["rnn"][0], batch, layer=1, head=1)  # one layer, one head: its α
    assert rnn.caption.startswith("α of each")


def test_translation_run_titles_with_the_source_text(loaded):
    task, dm = loaded["mt"]
    batch = dm.example_batch(2)
    examples = collect(task, batch)
    src, _ = dm.split_text("val")
    assert [e.title for e in examples] == [task.source_text(batch["src"][i, : int(n)].tolist())
                                           for i, n in enumerate(batch["src_lengths"])]
    assert examples[0].title.split()[:2] == src[0].split()[:2]
    for e in examples:
        for v in e.views:
            assert_distributions(v)
    assert_png(examples)


def test_example_batch_ids_take_those_examples(loaded):
    dm = loaded["rnn"][1]
    first, chosen = dm.example_batch(6), dm.example_batch(2, ids=[5, 1])
    for row, i in enumerate([5, 1]):
        n = int(first["src_lengths"][i])
        assert chosen["src"][row, :n].tolist() == first["src"][i, :n].tolist()
    with pytest.raises(ValueError, match="outside"):
        dm.example_batch(1, ids=[10_000])
    mt = loaded["mt"][1]
    assert mt.example_batch(2, ids=[2, 0])["idx"].tolist() == [mt.example_batch(3)["idx"][i] for i in (2, 0)]
    docs = loaded["han"][1]
    labels = [docs.splits["val"].labels[i] for i in (3, 0, 1)]
    assert docs.example_batch(3, ids=[3, 0, 1])["labels"].tolist() == [int(y) for y in labels]
    assert loaded["gat"][1].example_batch(2, ids=[7, 2])["nodes"].tolist() == [7, 2]
    tagged = loaded["tokens"][1]
    one, five = tagged.example_batch(1, ids=[4])["input_ids"][0], tagged.example_batch(5)["input_ids"][4]
    assert torch.equal(one, five[: len(one)]) and not five[len(one):].any()  # (padded to the batch)
    caps = loaded["captions"][1]
    assert caps.example_batch(2, ids=[6, 1])["idx"].tolist() == [6, 1]


def test_text_batch_encodes_source_and_reference_as_the_data_does(loaded):
    mt = loaded["mt"][1]
    batch = mt.text_batch(["ein mann\ta man", "zwei\ttwo"])
    want = mt.src_tok.encode("ein mann").ids[: mt.max_src_len]
    assert batch["src"][0, : len(want)].tolist() == want and batch["src_lengths"][0] == len(want)
    assert batch["tgt_out"][0, : len(mt.tgt_tok.encode("a man").ids)].tolist() == mt.tgt_tok.encode("a man").ids
    with pytest.raises(ValueError, match="text 2: give 'source<TAB>reference'"):
        mt.text_batch(["ein\tone", "no reference"])


def test_bert_text_batch_is_encoded_as_its_data_without_a_label(loaded):
    from attnflow.data.text_classification import encode_texts

    task, dm = loaded["bert"]
    batch = dm.text_batch(["a fine film .", "bad"])
    want, _ = encode_texts(dm.tokenizer, ["a fine film .", "bad"], dm.max_len)
    assert batch["input_ids"][0, : len(want[0])].tolist() == want[0].tolist()
    assert batch["labels"].tolist() == [-1, -1]
    examples = collect(task, batch)
    assert examples[0].title == "a fine film ." and not examples[0].caption.startswith("true")


# -- documents --------------------------------------------------------------------------------------
def _words(task, batch, b):
    lengths = batch["sent_lengths"][b]
    return [[task.itos[t] for t in batch["tokens"][b, s, : int(n)]] for s, n in enumerate(lengths) if n > 0]


def test_han_word_and_sentence_views(loaded):
    task, dm = loaded["han"]
    batch = dm.example_batch(4)
    with torch.no_grad():
        out = task.model(batch["tokens"], batch["sent_lengths"])
    examples = collect(task, batch)
    for b, e in enumerate(examples):
        sentences = _words(task, batch, b)
        n = len(sentences)
        assert kinds(e) == ["word", "sentence"]
        word, sentence = e.views
        assert word.labels == sentences and word.rows == [f"s{i + 1}" for i in range(n)]
        W = word.weights.shape[2]
        np.testing.assert_allclose(word.weights[0], out["word_weights"][b, :n, :W].numpy(), atol=1e-6)
        np.testing.assert_allclose(sentence.weights[0, 0], out["sent_weights"][b, :n].numpy(), atol=1e-6)
        assert sentence.labels == [word.rows]
        for v in e.views:
            assert_distributions(v)
        probs = out["logits"][b].softmax(-1)
        k = int(probs.argmax())
        assert e.title == f"true {task.class_names[int(batch['labels'][b])]}"
        assert e.prediction == f"{task.class_names[k]} (p={float(probs[k]):.3f})"
    assert_png(examples)


def test_self_attentive_hops_in_reading_order(loaded):
    task, dm = loaded["self_attentive"]
    batch = dm.example_batch(3)
    with torch.no_grad():
        hops = task.model(batch["tokens"], batch["sent_lengths"])["attention"]
    examples = collect(task, batch)
    for b, e in enumerate(examples):
        words = [w for s in _words(task, batch, b) for w in s]
        (view,) = e.views
        assert view.kind == "hops" and view.heads == 3 and view.labels == [words]
        np.testing.assert_allclose(view.weights[:, 0], hops[b, :, : len(words)].numpy(), atol=1e-6)
        assert_distributions(view)
    (one,) = collect(task, dm.example_batch(1), head=1)
    assert "hop 2 of 3" in one.caption and "mean over 3 hops" in examples[0].caption
    # the same documents through HAN: the same keys and titles
    han = collect(loaded["han"][0], batch)
    assert [(e.key, e.title) for e in examples] == [(e.key, e.title) for e in han]


def test_max_pooling_has_no_views_mean_pooling_uniform_ones(runs):
    """HN-MAX returns no weights: no views, still a prediction and a picture; HN-AVE's views are
    its uniform 1/n (what the mean attends to, as the model returns them). (The HAN run with its
    poolings swapped: ``pooling=max`` composes with han_imdb's scorer=dot refused.)"""
    for pooling in ("max", "mean"):
        task, dm, _ = load_task(runs["han"])
        for part in ("word_pooling", "sentence_pooling"):
            dim = getattr(task.model, part).input_dim
            setattr(task.model, part, POOLINGS.build({"name": pooling}, dim))
        examples = collect(task, dm.example_batch(2))
        assert all(e.prediction and e.picture for e in examples)
        if pooling == "max":
            assert [e.views for e in examples] == [[], []]
            continue
        assert kinds(examples[0]) == ["word", "sentence"]
        for v in examples[0].views:
            assert_distributions(v)
            np.testing.assert_allclose(v.weights[0, 0, : v.lengths[0]], 1 / v.lengths[0], atol=1e-6)


# -- BERT ------------------------------------------------------------------------------------------
def bert_maps(task, batch) -> list:
    """Every layer's attention (B, J, T, T), as the model returns it."""
    with torch.no_grad():
        return task.model(batch["input_ids"], batch["segment_ids"], batch["attention_mask"],
                          need_weights=True)[1]


def test_bert_cls_views_are_the_cls_rows(loaded):
    task, dm = loaded["bert"]
    batch = dm.example_batch(3)
    maps = bert_maps(task, batch)
    examples = collect(task, batch)
    for i, e in enumerate(examples):
        T = int(batch["attention_mask"][i].sum())
        tokens = [dm.tokenizer.id_to_token(t) for t in batch["input_ids"][i, :T].tolist()]
        assert kinds(e) == ["cls L1", "cls L2"] and tokens[0] == "[CLS]"
        for l, view in enumerate(e.views):
            assert view.rows == ["[CLS]"] and view.labels == [tokens]
            np.testing.assert_allclose(view.weights[:, 0], maps[l][i, :, 0, :T].numpy(), atol=1e-6)
            assert_distributions(view)
        assert e.title in ("true neg", "true pos") and e.prediction.split()[0] in ("neg", "pos")
    assert_png(examples)


def test_bert_token_views_are_the_self_attention(loaded):
    task, dm = loaded["tokens"]
    batch = dm.example_batch(2)
    maps = bert_maps(task, batch)
    examples = collect(task, batch)
    for i, e in enumerate(examples):
        T = int(batch["attention_mask"][i].sum())
        assert kinds(e) == ["self L1", "self L2"]
        for l, view in enumerate(e.views):
            assert view.weights.shape == (2, T, T) and view.labels == [view.rows] * T
            np.testing.assert_allclose(view.weights, maps[l][i, :, :T, :T].numpy(), atol=1e-6)
            assert_distributions(view)
        assert len(e.prediction.split()) == len(e.title.split())  # a tag per word
    assert_png(examples)


# -- graphs ----------------------------------------------------------------------------------------
def test_gat_neighbours_are_the_alpha_of_the_edges(loaded):
    task, dm = loaded["gat"]
    data = dm.example_batch(1)["graph"]
    degree = torch.bincount(data.edge_index[1], minlength=data.num_nodes)
    nodes = degree.argsort(descending=True)[:3].tolist()
    examples = collect(task, dm.example_batch(3, ids=nodes))
    with torch.no_grad():
        _, weights = task.model(data.x, data.edge_index, need_weights=True)
    assert [e.key for e in examples] == [f"node {t}" for t in nodes]
    for t, e in zip(nodes, examples):
        assert kinds(e) == [f"neighbours L{l + 1}" for l in range(len(weights))]
        for view, (edge_index, alpha) in zip(e.views, weights):
            into = edge_index[1] == t
            order = edge_index[0, into].argsort()
            assert view.labels == [[str(j) for j in edge_index[0, into][order].tolist()]]
            assert str(t) in view.labels[0] and view.lengths[0] > 2  # its self-loop, by its id
            np.testing.assert_allclose(view.weights[:, 0], alpha[into][order].T.numpy(), atol=1e-6)
            assert view.rows == [f"node {t}"]
            assert_distributions(view)
    assert_png(examples)


# -- captioning --------------------------------------------------------------------------------------
def test_caption_regions_teacher_forced(loaded):
    task, dm = loaded["captions"]
    batch = dm.example_batch(2)
    with torch.no_grad():
        _, alpha = task.model(batch["images"], None, batch["tgt_in"], need_weights=True)
    examples = collect(task, batch)
    L = alpha.shape[-1]
    for i, e in enumerate(examples):
        T = int((batch["tgt_out"][i] != task.pad_id).sum())
        (view,) = e.views
        assert view.kind == "regions" and view.rows == [task.itos[t] for t in batch["tgt_out"][i, :T]]
        assert view.labels == [[str(j) for j in range(L)]] * T
        np.testing.assert_allclose(view.weights, alpha[i, :T].permute(1, 0, 2).numpy(), atol=1e-6)
        assert_distributions(view)
        assert e.title == " ".join(view.rows[:-1])
    assert_png(examples)
