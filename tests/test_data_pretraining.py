"""The BERT pretraining data module (attnflow/data/pretraining.py): instances, masking, tokenizer.

Statistical checks use large samples and binomial bounds of 5 standard deviations (a false
failure about once in 3.5 million runs); the expected values are Devlin et al. 2019's (§3.1: 15%
of tokens selected, of those 80% [MASK] / 10% random / 10% unchanged; §3.1: 50% random next).
"""

from __future__ import annotations

import gzip
import json
import math
import random

import numpy as np
import pytest
import torch

from attnflow.data.errors import DataError
from attnflow.data.corpus import CLS, MASK, PAD, SEP, SPECIALS, read_documents
from attnflow.data.pretraining import IGNORE, MaskingCollate, PretrainingDataModule, make_instances, mask_tokens
from support import DATA_DIR, compose_cfg

Z = 5.0  # standard deviations of the binomial bounds
N_SPECIAL = len(SPECIALS)
WORDS = [f"w{i}" for i in range(300)]


def bound(p: float, n: int) -> float:
    return Z * math.sqrt(p * (1 - p) / n)


def write_corpus(path, n_docs, seed, extra_word=None, blank_line=False):
    """``n_docs`` documents of 3–8 sentences of 4–12 random words, as a .txt file."""
    rng = random.Random(seed)
    docs = []
    for _ in range(n_docs):
        sents = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 12))) + "."
                 for _ in range(rng.randint(3, 8))]
        if extra_word:
            sents.append(f"{extra_word} {extra_word}.")
        docs.append(sents)
    sep = "\n\n" if blank_line else "\n"
    path.write_text(sep.join(("\n" if blank_line else " ").join(s) for s in docs) + "\n")
    return docs


@pytest.fixture()
def corpus(tmp_path):
    write_corpus(tmp_path / "train.txt", 60, 0, extra_word="qwertyuiop")
    write_corpus(tmp_path / "dev.txt", 20, 1, extra_word="zyxwvut")
    return tmp_path


def module(corpus, **kw):
    kw = {"vocab_size": 400, "max_len": 48, "batch_size": 16, **kw}
    return PretrainingDataModule(train_path=str(corpus / "train.txt"), val_path=str(corpus / "dev.txt"), **kw)


# -- masking -----------------------------------------------------------------------------------------
def test_masking_statistics_over_a_large_sample():
    g = torch.Generator().manual_seed(0)
    V, B, T = 1000, 2000, 64
    ids = torch.randint(N_SPECIAL, V, (B, T), generator=g)
    lens = torch.randint(6, T + 1, (B,), generator=g)
    attention = torch.arange(T)[None, :] < lens[:, None]
    ids[:, 0] = CLS
    ids[torch.arange(B), lens - 1] = SEP
    mid = torch.randint(2, 5, (B,), generator=g)  # a [SEP] in the middle too
    ids[torch.arange(B), mid] = SEP
    ids[~attention] = PAD
    out, labels = mask_tokens(ids, attention, V, 0.15, torch.Generator().manual_seed(1))
    selected = labels != IGNORE
    eligible = attention & (ids != CLS) & (ids != SEP) & (ids != PAD)
    assert not (selected & ~eligible).any()  # specials and padding never selected
    assert torch.equal(labels[selected], ids[selected])  # labels hold the original tokens
    assert torch.equal(out[~selected], ids[~selected])  # nothing else changes
    n = eligible.sum(1).numpy()
    # per sequence: round(0.15 n) of its eligible tokens, at least one
    assert np.array_equal(selected.sum(1).numpy(), np.maximum(1, np.floor(0.15 * n + 0.5)))
    frac = selected.sum().item() / eligible.sum().item()
    assert abs(frac - 0.15) < 0.005  # rounding per sequence of mean length ~33 moves it < 0.5%
    m = selected.sum().item()
    was_masked = (out == MASK)[selected].float().mean().item()
    changed = ((out != MASK) & (out != ids))[selected].float().mean().item()
    p_same = 1 / (V - N_SPECIAL)  # a random replacement may draw the original token
    assert abs(was_masked - 0.8) < bound(0.8, m)
    assert abs(changed - 0.1 * (1 - p_same)) < bound(0.1, m)
    assert abs((out == ids)[selected].float().mean().item() - (0.1 + 0.1 * p_same)) < bound(0.1, m)
    replaced = out[selected & (out != MASK) & (out != ids)]
    assert replaced.min() >= N_SPECIAL and replaced.max() < V  # random tokens are never special
    # the random tokens are uniform over the non-special ids: each decile of the range ≈ 10%
    counts = torch.bincount((replaced - N_SPECIAL) * 10 // (V - N_SPECIAL), minlength=10).float()
    assert ((counts / len(replaced) - 0.1).abs() < bound(0.1, len(replaced))).all()


def test_masking_is_dynamic_for_training_and_fixed_for_evaluation(corpus):
    dm = module(corpus)
    dm.setup()
    items = [dm.splits["train"][i] for i in range(16)]
    train = MaskingCollate(dm.vocab_size, 0.15, dynamic=True)
    first, second = train(items), train(items)
    assert torch.equal(first["attention_mask"], second["attention_mask"])
    assert not torch.equal(first["mlm_labels"], second["mlm_labels"])  # new masks each batch
    evaluation = dm.collate(False)
    assert torch.equal(evaluation(items)["input_ids"], evaluation(items)["input_ids"])
    assert torch.equal(evaluation(items)["mlm_labels"], evaluation(items)["mlm_labels"])


# -- instances ---------------------------------------------------------------------------------------
def synthetic_docs(n_docs, seed):
    """Documents whose token ids encode where they come from: id = 10⁴·(doc+1) + position."""
    rng = random.Random(seed)
    docs = []
    for d in range(n_docs):
        lens = [rng.randint(1, 15) for _ in range(rng.randint(1, 12))]
        pos = np.cumsum([0] + lens)
        docs.append([np.arange(pos[i], pos[i + 1]) + 10_000 * (d + 1) for i in range(len(lens))])
    return docs


def test_nsp_half_random_and_true_pairs_are_consecutive_spans():
    max_len = 40
    pairs = make_instances(synthetic_docs(6000, 0), max_len, 0.1, seed=3)
    assert len(pairs) > 12000
    labels = np.array([y for _, _, y, _, _ in pairs])
    assert abs(labels.mean() - 0.5) < bound(0.5, len(labels))
    for a, b, y, d, bd in pairs:
        assert len(a) >= 1 and len(b) >= 1 and len(a) + len(b) <= max_len - 3
        doc_a, doc_b = a // 10_000 - 1, b // 10_000 - 1
        assert (doc_a == d).all() and (doc_b == bd).all()
        assert (np.diff(a) == 1).all() and (np.diff(b) == 1).all()  # spans, in order
        if y == 0:  # the true next span of the same document
            assert bd == d and b[0] > a[-1]
            if len(a) + len(b) < max_len - 3:  # not truncated: B starts where A ends
                assert b[0] == a[-1] + 1
        else:
            assert bd != d
    for seed in range(100):  # few documents: "another document" is never this one
        for a, b, y, d, bd in make_instances(synthetic_docs(3, seed), max_len, 0.1, seed):
            assert (bd != d) == bool(y) and (b // 10_000 - 1 == bd).all()


def test_batches_follow_the_contract(corpus):
    dm = module(corpus)
    dm.setup()
    data = dm.splits["train"]
    batch = next(iter(dm.train_dataloader()))
    ids, seg, att, labels = (batch[k] for k in ("input_ids", "segment_ids", "attention_mask", "mlm_labels"))
    B, T = ids.shape
    assert att.dtype == torch.bool and labels.shape == (B, T) and batch["nsp_labels"].shape == (B,)
    for r in range(B):
        a, b, y = data[int(batch["idx"][r])][1:]
        n = len(a) + len(b) + 3
        restored = torch.where(labels[r] != IGNORE, labels[r], ids[r])
        expect = [CLS, *a.tolist(), SEP, *b.tolist(), SEP]
        assert restored[:n].tolist() == expect and (ids[r, n:] == PAD).all()
        assert att[r].tolist() == [True] * n + [False] * (T - n)
        assert seg[r].tolist() == [0] * (len(a) + 2) + [1] * (len(b) + 1) + [0] * (T - n)
        assert int(batch["nsp_labels"][r]) == y
        assert (ids[r] == SEP).sum() == 2 and ids[r, 0] == CLS  # specials are never masked
        assert (labels[r] != IGNORE).sum() >= 1


# -- tokenizer, files, options ---------------------------------------------------------------------
def test_tokenizer_trained_on_train_only_and_saved(corpus, tmp_path):
    run = tmp_path / "run"
    dm = module(corpus)
    dm.set_run_dir(run)
    ctx, task = dm.model_context(), dm.task_context()
    assert ctx == {"vocab_size": dm.tokenizer.get_vocab_size(), "pad_id": PAD}
    assert task["mask_id"] == MASK and task["itos"][:N_SPECIAL] == SPECIALS
    vocab = dm.tokenizer.get_vocab()
    assert any("qwertyuiop" in t for t in vocab)  # frequent in train: a whole word piece
    assert not any("zyxw" in t for t in vocab)  # only in dev: never learnt
    saved = run / "tokenizer" / "wordpiece.json"
    assert saved.is_file()
    (corpus / "train.txt").write_text("completely different words here.\nand another one.\n")
    again = module(corpus)
    again.set_run_dir(run)  # the saved tokenizer is read back, not retrained
    assert again.tokenizer is None and again.task_context()["itos"] == task["itos"]


def test_limit_blank_lines_and_jsonl_markup(tmp_path):
    docs = write_corpus(tmp_path / "c.txt", 30, 2, blank_line=True)
    texts = read_documents(tmp_path / "c.txt", documents="blank_line")
    assert len(texts) == 30 and texts[4].split("\n") == docs[4]
    sub = read_documents(tmp_path / "c.txt", documents="blank_line", limit=7, seed=5)
    assert len(sub) == 7 and set(sub) <= set(texts)
    assert len(read_documents(tmp_path / "c.txt", documents="line")) == sum(len(d) for d in docs)
    rows = [{"text": f"Review {i} starts.<br /><br />Then it ends {i}", "label": 1} for i in range(5)]
    path = tmp_path / "r.jsonl.gz"
    with gzip.open(path, "wt") as f:
        f.write("\n".join(json.dumps(r) for r in rows) + "\n")
    dm = PretrainingDataModule(train_path=str(path), val_path=str(path), vocab_size=100, max_len=16)
    docs = dm.encode_documents(read_documents(path))
    assert [len(d) for d in docs] == [2] * 5  # <br /> is a sentence break
    assert not any("<" in t or "br" == t.strip("▁") for t in dm.tokenizer.get_vocab())


def test_bad_input_is_named(tmp_path, corpus):
    with pytest.raises(DataError, match="file not found: .*missing.txt"):
        PretrainingDataModule(train_path=str(tmp_path / "missing.txt"),
                              val_path=str(corpus / "dev.txt")).model_context()
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "fine."}\n{"body": "no text field"}\n')
    with pytest.raises(DataError, match=r"data 'bert_pretraining'.*bad.jsonl line 2.*'text'"):
        read_documents(bad)
    with pytest.raises(DataError, match="corpus.xml: unknown corpus format; use .txt, .jsonl, .csv"):
        read_documents(tmp_path / "corpus.xml")
    one = tmp_path / "one.txt"
    one.write_text("a single document. with two sentences.\n")
    with pytest.raises(DataError, match="at least 2 documents"):
        PretrainingDataModule(train_path=str(one), val_path=str(one), vocab_size=50).setup()
    with pytest.raises(ValueError, match="train_path"):
        PretrainingDataModule(val_path="x.txt")


@pytest.mark.skipif(not (DATA_DIR / "imdb" / "train.jsonl.gz").is_file(),
                    reason=f"IMDB not found under {DATA_DIR}/imdb (set ATTNFLOW_DATA_DIR)")
@pytest.mark.slow
def test_imdb_preset_builds_from_the_config_tree(tmp_path):
    from attnflow.config.registry import DATA

    cfg = compose_cfg(["data=bert_pretraining", "data.limit_train=200", "data.limit_val=40",
                       "data.vocab_size=2000", f"paths.data_dir={DATA_DIR}"])
    dm = DATA.build(cfg.data, path="data")
    dm.set_run_dir(tmp_path)
    assert dm.model_context()["vocab_size"] == 2000
    batch = dm.example_batch(4)
    assert batch["input_ids"].shape[0] == 4 and batch["input_ids"].shape[1] <= 128
    assert len(dm.split_texts("train")) == 200 and len(dm.split_texts("val")) == 40


# -- fields one corpus format reads and the other leaves unread ------------------------------------

def test_documents_and_text_field_are_each_read_by_one_corpus_format(tmp_path, corpus):
    """The claims: ``documents`` changes nothing for a JSON-lines corpus, ``text_field`` nothing for
    a .txt one (each is read by the other format)."""
    rows = tmp_path / "r.jsonl"
    rows.write_text("".join(json.dumps({"text": f"Doc {i}. Second {i}.\n\nThird {i}.", "body": "b."})
                            + "\n" for i in range(4)))
    assert read_documents(rows, documents="line") == read_documents(rows, documents="blank_line")
    assert read_documents(rows, text_field="body") != read_documents(rows)
    txt = corpus / "train.txt"
    assert read_documents(txt, text_field="body") == read_documents(txt)
