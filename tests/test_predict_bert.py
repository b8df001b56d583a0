"""attnflow-predict on BERT runs: a fine-tuned run's labels and probabilities, a pretraining run's
[MASK] fills, the ⟨CLS⟩ attention as data (--save-attention) and as HTML (--explain, rendered in
headless Chromium) — each checked against the model rebuilt here from the checkpoint and run on
one text at a time — and the one-line refusals."""

from __future__ import annotations

import html
import json
import random
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

import attnflow.cli.predict_io as predict_io
from attnflow.cli.predict import main
from attnflow.config.registry import MODELS
from attnflow.io.weights import atomic_torch_save
from cli_runs import QUIET, assert_streams, fabricate_run, one_torch_thread, write_jsonl  # noqa: F401
from support import CHROMIUM, CHROMIUM_MISSING, chromium_dom

CLS, SEP, MASK = 2, 3, 4
POSITIVE = "good great wonderful brilliant moving superb".split()
NEGATIVE = "bad awful boring dull stupid poor".split()
FILLER = "the film was a and it story acting plot cast music scene".split()
# small, with a large init scale: attention far from uniform, so a row/column mix-up would show
TINY = ["model.d_model=16", "model.layers=2", "model.ffn_dim=32", "attention.heads=2",
        "model.init_std=0.5", "data.vocab_size=120"]


def _reviews(n: int, seed: int):
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        words = [rng.choice(FILLER) for _ in range(rng.randint(5, 9))]
        words += [rng.choice(POSITIVE if i % 2 else NEGATIVE) for _ in range(2)]
        rng.shuffle(words)
        rows.append({"text": " ".join(words) + ".", "label": ["neg", "pos"][i % 2]})
    return rows


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Untrained BERT runs: fine-tuned-like (experiment=bert_imdb, data.max_len=16) and
    pretraining (experiment=bert_pretrain_imdb, data.max_len=24)."""
    base = tmp_path_factory.mktemp("bert_runs")
    rows = _reviews(40, 0)
    write_jsonl(base / "train.jsonl", rows)
    write_jsonl(base / "dev.jsonl", rows[:10])
    (base / "corpus.txt").write_text("".join(f"{r['text']} {r['text']}\n" for r in rows))
    ft = fabricate_run(["experiment=bert_imdb", f"data.train_path={base}/train.jsonl",
                        f"data.val_path={base}/dev.jsonl", "data.test_path=", "data.max_len=16",
                        "data.labels=[neg,pos]",
                        *TINY, *QUIET], base / "ft")
    # as if fine-tuned from a pretraining run deleted since: prediction needs only this run
    path = ft / "checkpoints" / "last.ckpt"
    ckpt = torch.load(path, weights_only=True)
    for group, field in (("model", "init_from"), ("data", "tokenizer_from")):
        ckpt["attnflow_config"][group][field] = str(base / "deleted_pretraining_run")
    ckpt["attnflow_config"]["data"]["vocab_size"] = None
    atomic_torch_save(ckpt, path)  # (with its digest, as attnflow writes it)
    (ft / "config.yaml").unlink()
    return {"ft": ft,
            "pre": fabricate_run(["experiment=bert_pretrain_imdb", f"data.train_path={base}/corpus.txt",
                                  f"data.val_path={base}/corpus.txt", "data.max_len=24", *TINY, *QUIET],
                                 base / "pre")}


def _rebuild(run: Path):
    """(model, tokenizer, config) from the run's files, without attnflow's prediction code."""
    from tokenizers import Tokenizer

    ckpt = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    cfg = ckpt["attnflow_config"]
    tok = Tokenizer.from_file(str(run / "tokenizer" / "wordpiece.json"))
    classes = len(ckpt.get("attnflow_artifacts", {}).get("class_names") or [])
    model = MODELS.build({**cfg["model"], "init_from": None}, vocab_size=tok.get_vocab_size(),
                         pad_id=0, num_classes=classes)  # the checkpoint holds every weight
    model.load_state_dict({k[6:]: v for k, v in ckpt["state_dict"].items() if k.startswith("model.")})
    return model.eval(), tok, cfg


def _alone(model, ids, segments=None):
    """hidden (1, T, d) and the ⟨CLS⟩ rows (N, J, T) of one unpadded text."""
    x = torch.tensor([ids])
    seg = torch.zeros_like(x) if segments is None else torch.tensor([segments])
    with torch.no_grad():
        hidden, maps = model(x, seg, torch.ones_like(x, dtype=torch.bool), need_weights=True)
    return hidden, torch.stack([m[0, :, 0, :] for m in maps]).numpy()


def _out(capsys):
    cap = capsys.readouterr()
    return cap.out.split("\n")[:-1], cap.err


def _shown(token: str) -> str:  # the page's display of a piece: the ▁ word-start mark dropped
    return token[1:] if token.startswith("\u2581") and len(token) > 1 else token


# -- a fine-tuned run --------------------------------------------------------------------------------
@pytest.mark.slow
def test_labels_probabilities_and_cls_attention_equal_the_models_own(runs, tmp_path, capsys):
    model, tok, _ = _rebuild(runs["ft"])
    long = " ".join(["the film was a wonderful and moving story"] * 4) + "."
    texts = ["A good film, wonderful acting.", "", "bad plot, it was dull.", long]
    npz, page = tmp_path / "attn.npz", tmp_path / "explain.html"
    assert main([str(runs["ft"]), *texts, "--json", "--save-attention", str(npz),
                 "--explain", str(page), "--batch-size", "4"]) == 0
    out, err = _out(capsys)
    assert len(out) == 4
    assert json.loads(out[1]) == {"label": None, "probability": None, "probabilities": None,
                                  "text": "", "empty": True}
    assert "argument 2 is empty" in err
    z = np.load(npz)
    assert str(z["kind"]) == "text" and int(z["lines"]) == 4
    assert z["1/tokens"].shape == (0,) and "1/cls_attention" not in z.files
    for i in (0, 2, 3):
        sub = tok.encode(texts[i], add_special_tokens=False).ids
        ids = [CLS, *sub[:14], SEP]  # data.max_len=16: [CLS], 14 subwords, [SEP]
        hidden, cls = _alone(model, ids)
        with torch.no_grad():
            probs = torch.softmax(model.classify_logits(hidden), -1)[0]
        got = json.loads(out[i])
        np.testing.assert_allclose([got["probabilities"][c] for c in ("neg", "pos")], probs, atol=1e-5)
        assert got["label"] == ["neg", "pos"][int(probs.argmax())] and got["text"] == texts[i]
        assert got["probability"] == pytest.approx(float(probs.max()), abs=1e-5)
        assert z[f"{i}/tokens"].tolist() == [tok.id_to_token(t) for t in ids]
        a = z[f"{i}/cls_attention"]
        assert a.shape == (2, 2, len(ids))  # N layers, J heads, T tokens (padding left out)
        np.testing.assert_allclose(a, cls, atol=1e-5)  # in a padded batch = alone
        np.testing.assert_allclose(a.sum(-1), 1.0, atol=1e-5)  # so zero weight on the padding
        assert a.max() > 2.0 / len(ids)  # not uniform: the check above tells rows from columns
    n_long = len(tok.encode(long, add_special_tokens=False).ids)
    assert n_long > 14
    assert (f"argument 4 has {n_long} subwords; the model reads at most 14 between [CLS] and [SEP] "
            f"(the run's data.max_len=16): {n_long - 14} cut") in err
    assert "argument 1 has" not in err and "1 of 4 texts were longer" in err

    # the page: a block per text with a row per (layer, head) + the last layer's mean, every token
    text = page.read_text()
    blocks = text.split('<div class="doc">')[1:]
    assert len(blocks) == 3  # the empty line has none
    for i, block in zip((0, 2, 3), blocks):
        tokens = z[f"{i}/tokens"].tolist()
        rows = re.findall(r"<tr[^>]*><th>(.*?)</th>(.*?)</tr>", block)
        assert [r[0] for r in rows] == [f"layer {l} head {j}" for l in (1, 2) for j in (1, 2)] + [
            "layer 2 mean of heads"]
        for _, cells in rows:
            assert re.findall(r"<td[^>]*>(.*?)</td>", cells) == [html.escape(_shown(t)) for t in tokens]
        weights = [float(w) for w in re.findall(r'title="([0-9.]+)"', rows[-1][1])]
        np.testing.assert_allclose(weights, z[f"{i}/cls_attention"][-1].mean(0), atol=1e-4)
        assert block.count('<img class="allheads"') == 1
    pred = json.loads(out[0])
    assert f"predicted {pred['label']} (p={pred['probability']:.3f})" in blocks[0]


@pytest.mark.slow
def test_plain_lines_file_input_and_streaming(runs, tmp_path, capsys, monkeypatch):
    f = tmp_path / "texts.jsonl"
    write_jsonl(f, [{"text": "A good film."}, {"text": "Dull."}])
    with f.open("a") as g:
        g.write("\n")  # a blank line is an empty text
    assert main([str(runs["ft"]), "--file", str(f), "--json"]) == 0
    as_json, _ = _out(capsys)
    assert main([str(runs["ft"]), "--file", str(f)]) == 0
    plain, err = _out(capsys)
    assert len(plain) == 3 and plain[2] == "-\t-\t(empty: no words)" and "line 3 is empty" in err
    for line, js in zip(plain[:2], as_json[:2]):
        r = json.loads(js)
        assert line == f"{r['label']}\t{r['probability']:.4f}\t{r['text']}"
    assert_streams(monkeypatch, predict_io, main, [str(runs["ft"])], "A good film.")


# -- a pretraining run --------------------------------------------------------------------------------
@pytest.mark.slow
def test_pretraining_run_fills_each_mask_with_the_mlm_heads_top_k(runs, capsys):
    model, tok, _ = _rebuild(runs["pre"])
    text = "the film was [MASK] . [SEP] a [mask] and [MASK] story"
    assert main([str(runs["pre"]), text, "no mask here", "--json", "--top-k", "3"]) == 0
    out, err = _out(capsys)
    assert "argument 2 has no [MASK] to fill" in err
    ids = [CLS, *tok.encode(text, add_special_tokens=False).ids, SEP]
    first = ids.index(SEP)  # [CLS] A [SEP]: segment 0; B [SEP]: segment 1, as in pretraining
    assert first < len(ids) - 1 and ids.count(MASK) == 2  # '[mask]' is no mask token
    hidden, _ = _alone(model, ids, [0] * (first + 1) + [1] * (len(ids) - first - 1))
    where = [t for t, x in enumerate(ids) if x == MASK]
    with torch.no_grad():
        top = torch.softmax(model.mlm_logits(hidden[0, where]), -1).topk(3)
    got = json.loads(out[0])
    assert len(got["masks"]) == 2
    for m, ids_k, p_k in zip(got["masks"], top.indices.tolist(), top.values.tolist()):
        assert [c["token"] for c in m] == ids_k
        assert [c["token_str"] for c in m] == [tok.id_to_token(t) for t in ids_k]
        np.testing.assert_allclose([c["score"] for c in m], p_k, atol=1e-5)
    filled = list(ids)
    for t, k in zip(where, top.indices[:, 0].tolist()):
        filled[t] = k
    # the run's own WordPiece decoder spells the same text ([UNK] kept; spaces around specials aside)
    spelt = tok.decode([t for t in filled if t not in (CLS, SEP)], skip_special_tokens=False)
    assert "".join(got["sequence"].split()) == "".join(spelt.split())
    assert json.loads(out[1])["masks"] == []
    assert main([str(runs["pre"]), text]) == 0  # plain: the filled text, a column per [MASK]
    (line,), _ = _out(capsys)
    cols = line.split("\t")
    assert cols[0] == got["sequence"] and len(cols) == 3
    with torch.no_grad():
        top5 = torch.softmax(model.mlm_logits(hidden[0, where]), -1).topk(5)  # the default top-k
    for col, ids_k, p_k in zip(cols[1:], top5.indices.tolist(), top5.values.tolist()):
        pairs = [c.rsplit(":", 1) for c in col.split(" ")]
        assert [t for t, _ in pairs] == [tok.id_to_token(t) for t in ids_k]
        np.testing.assert_allclose([float(p) for _, p in pairs], p_k, atol=1e-4)


# -- refusals ---------------------------------------------------------------------------------------
def _one_line_refusal(capsys, args, expect: str) -> None:
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and expect in err, err


@pytest.mark.slow
def test_refusals_are_one_line_and_write_no_output(runs, tmp_path, capsys):
    out = tmp_path / "labels.tsv"
    ft, pre = str(runs["ft"]), str(runs["pre"])
    _one_line_refusal(capsys, [ft, "x", "--explain", "-o", str(out)], "--explain OUT.html")
    with pytest.raises(SystemExit) as exc:
        main([pre, "a [MASK]", "--top-k", "0"])
    assert exc.value.code == 2 and "argument --top-k: must be >= 1, got 0" in capsys.readouterr().err
    _one_line_refusal(capsys, [ft, "--file", str(tmp_path / "none.txt"), "-o", str(out)],
                      "no such --file")
    (tmp_path / "empty.txt").write_text("")  # named, as attnflow-translate names its -f
    _one_line_refusal(capsys, [ft, "--file", str(tmp_path / "empty.txt"), "-o", str(out)],
                      f"no texts given (arguments, --file or stdin): --file {tmp_path / 'empty.txt'} "
                      f"holds no lines")
    page = tmp_path / "e.html"  # both written to one file: the work done, then a failed rename
    _one_line_refusal(capsys, [ft, "x", "--explain", str(page), "-o", str(page)],
                      f"-o {page} and --explain {page} name the same file")
    assert not out.exists() and not page.exists()
    out.write_text("earlier results\n")  # an existing output: refused before any work, kept
    _one_line_refusal(capsys, [ft, "x", "-o", str(out)], f"-o {out} exists and is not overwritten")
    assert out.read_text() == "earlier results\n"
    bare = tmp_path / "bare"  # no tokenizer/ and a checkpoint without artifacts
    shutil.copytree(runs["ft"], bare)
    shutil.rmtree(bare / "tokenizer")
    ckpt = torch.load(bare / "checkpoints" / "last.ckpt", weights_only=True)
    del ckpt["attnflow_artifacts"]
    atomic_torch_save(ckpt, bare / "checkpoints" / "last.ckpt")
    _one_line_refusal(capsys, [str(bare), "x"], "the run has no tokenizer")


# -- the page in a browser ----------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.skipif(not CHROMIUM.exists(), reason=CHROMIUM_MISSING)
def test_explanation_renders_in_headless_chromium(runs, tmp_path, capsys):
    model, tok, _ = _rebuild(runs["pre"])
    text = "a good [MASK] . [SEP] dull <b>bad</b>"
    page = tmp_path / "explain.html"
    assert main([str(runs["pre"]), text, "--explain", str(page)]) == 0
    capsys.readouterr()
    probe = ("<script>addEventListener('load', () => { const im = [...document.images];"
             "document.body.dataset.loaded = im.filter(i => i.complete && i.naturalWidth == 1200"
             " && i.naturalHeight == 600).length;"
             "const td = [...document.querySelectorAll('td')]; document.body.dataset.cells = td.length;"
             # the browser parses the shading: each row's heaviest token in full blue
             "document.body.dataset.full = td.filter(c => getComputedStyle(c).backgroundColor"
             " == 'rgb(30, 90, 220)').length;});</script></body>")
    dom = chromium_dom(page, probe, tmp_path)
    read = " ".join(text.replace("<b>", " ").replace("</b>", " ").split())  # markup removed, as in training
    tokens = [tok.id_to_token(t) for t in [CLS, *tok.encode(read, add_special_tokens=False).ids, SEP]]
    assert len(tokens) <= 24 and "[MASK]" in tokens  # all read (data.max_len=24)
    rows = 2 * 2 + 1
    assert 'data-loaded="1"' in dom and f'data-cells="{rows * len(tokens)}"' in dom, \
        re.search(r"<body[^>]*>", dom).group(0)
    assert int(re.search(r'data-full="(\d+)"', dom).group(1)) >= rows
    first_row = re.search(r"<tr[^>]*><th>layer 1 head 1</th>(.*?)</tr>", dom).group(1)
    assert re.findall(r"<td[^>]*>(.*?)</td>", first_row) == [html.escape(_shown(t)) for t in tokens]


@pytest.mark.slow
def test_a_multitask_run_gets_a_label_per_task(tmp_path, capsys):
    """One column pair (label, probability) per task, as the run's model rebuilt here and
    run on one text at a time gives them; JSON lines carry every task's probabilities."""
    rows = [{**r, "rating": [2, 9][i % 2]} for i, r in enumerate(_reviews(30, 1))]
    write_jsonl(tmp_path / "train.jsonl", rows)
    run = fabricate_run(["experiment=bert_imdb_multitask", f"data.common.train_path={tmp_path}/train.jsonl",
                         f"data.common.val_path={tmp_path}/train.jsonl", "data.common.test_path=",
                         "data.common.max_len=16", "data.tasks.polarity.labels=[neg,pos]",
                         "data.tasks.rating.labels=null", "data.common.vocab_size=120",
                         *[o for o in TINY if not o.startswith("data.")], *QUIET], tmp_path / "mt")
    texts = ["the film was good and great .", "a dull and poor plot"]
    assert main([str(run), *texts]) == 0
    header, *lines = capsys.readouterr().out.splitlines()
    assert header.split("\t") == ["polarity", "polarity_probability", "rating", "rating_probability", "text"]
    from tokenizers import Tokenizer

    ckpt = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    model = MODELS.build(ckpt["attnflow_config"]["model"], vocab_size=120, pad_id=0,
                         tasks={"polarity": ("text_classification", 2), "rating": ("text_classification", 2)})
    model.load_state_dict({k[6:]: v for k, v in ckpt["state_dict"].items() if k.startswith("model.")})
    tok = Tokenizer.from_file(str(run / "tokenizer" / "wordpiece.json"))
    for text, line in zip(texts, lines):
        ids = torch.tensor([[CLS, *tok.encode(text, add_special_tokens=False).ids, SEP]])
        with torch.no_grad():
            h = model.eval()(ids, torch.zeros_like(ids), ids != 0)
        cells = line.split("\t")
        for k, (task, names) in enumerate((("polarity", ["neg", "pos"]), ("rating", ["2", "9"]))):
            p = torch.softmax(model.classify_logits(h, task), -1)[0]
            assert cells[2 * k] == names[int(p.argmax())]
            assert float(cells[2 * k + 1]) == pytest.approx(float(p.max()), abs=1e-4)
        assert cells[-1] == text
    assert main([str(run), texts[0], "--json"]) == 0
    row = json.loads(capsys.readouterr().out)
    assert set(row) == {"polarity", "rating", "text"} and set(row["rating"]["probabilities"]) == {"2", "9"}


def test_a_multitask_run_with_a_token_task_tags_its_words(tmp_path, capsys):
    """A token-classification task's column is word/TAG per word, as its head gives them."""
    write_jsonl(tmp_path / "train.jsonl", _reviews(30, 2))
    run = fabricate_run(["experiment=bert_imdb_multitask", "data=multitask",  # (no task.tasks: each
                         f"data.common.train_path={tmp_path}/train.jsonl",  # task is its data's)
                         f"data.common.val_path={tmp_path}/train.jsonl", "data.common.max_len=16",
                         "data.tasks.polarity.labels=[neg,pos]", "data.common.vocab_size=120",
                         "data.tasks.ner.name=synthetic_ner", "data.tasks.ner.train_size=20",
                         "data.tasks.ner.val_size=5", "data.tasks.ner.test_size=0", "data.tasks.ner.max_len=16",
                         *[o for o in TINY if not o.startswith("data.")], *QUIET], tmp_path / "mt")
    assert main([str(run), "Anna flew to Paris .", "--json"]) == 0
    row = json.loads(capsys.readouterr().out)
    assert row["ner"]["words"] == ["Anna", "flew", "to", "Paris", "."] and len(row["ner"]["tags"]) == 5
    assert set(row["polarity"]["probabilities"]) == {"neg", "pos"}
    from attnflow.inference.texts import load_multitask, tag_lines
    from attnflow.io.checkpoints import load_run

    runs, kinds = load_multitask(load_run(run))
    assert kinds == {"polarity": "text_classification", "ner": "token_classification"}
    want = tag_lines(runs["ner"], ["Anna flew to Paris ."], "ner")[0]
    assert row["ner"]["tags"] == want["tags"]  # the ner head's, not another's
    assert main([str(run), "Anna flew to Paris ."]) == 0
    header, line = capsys.readouterr().out.splitlines()
    assert header == "polarity\tpolarity_probability\tner\ttext"
    assert line.split("\t")[2] == " ".join(f"{w}/{t or '-'}" for w, t in zip(want["words"], want["tags"]))
