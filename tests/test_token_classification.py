"""Token classification: the alignment of word tags to first WordPieces, the CoNLL and JSON-lines
readers and their one-line errors, the data modules (files and the generated NER set), the
entity scores against seqeval and a hand count, and the task's loss and metrics."""

from __future__ import annotations

import gzip
import json
import math

import numpy as np
import pytest
import torch
from torch import nn

from attnflow.config.registry import DATA, TASKS, ConfigError
from attnflow.data.corpus import CLS, PAD, SEP, SPECIALS, UNK
from attnflow.data.errors import DataError
from attnflow.data.synthetic_ner import TAGS, draw_splits, write_splits
from attnflow.data.tagged import (IGNORE, align_first_pieces, collate_tagged, encode_tagged,
                                  read_tagged, tag_values)
from attnflow.data.token_classification import SyntheticNerDataModule, TokenClassificationDataModule
from attnflow.tasks.token_classification import TokenClassificationTask
from attnflow.tasks.token_metrics import EntityScore, entity_counts, entity_scores, word_tags

PIECES = ["▁john", "▁smith", "##son", "▁lives", "▁in", "▁new", "▁york", "▁", "."]


def known_tokenizer():
    """A WordPiece tokenizer of a fixed vocabulary (BERT's specials at 0–4, then PIECES), with the
    normaliser and pre-tokenizer of the ones trained here."""
    from tokenizers import models

    from attnflow.data.parallel import new_tokenizer

    tok = new_tokenizer("wordpiece", True)
    vocab = {t: i for i, t in enumerate(SPECIALS + PIECES)}
    tok.model = models.WordPiece(vocab, unk_token="[UNK]", continuing_subword_prefix="##")
    return tok, vocab


# -- alignment ---------------------------------------------------------------------------------------
def test_first_piece_carries_the_tag_and_the_rest_is_ignored():
    tok, v = known_tokenizer()
    words = "John Smithson lives in New York .".split()
    tags = ["B-PER", "I-PER", "O", "O", "B-LOC", "I-LOC", "O"]
    index = {t: i for i, t in enumerate(TAGS)}
    ids, labels, cut = encode_tagged(tok, [words], [np.array([index[t] for t in tags])], 32)
    # "Smithson" is ▁smith ##son and "." is ▁ . (Metaspace, then the punctuation split)
    assert ids[0].tolist() == [CLS, v["▁john"], v["▁smith"], v["##son"], v["▁lives"], v["▁in"],
                               v["▁new"], v["▁york"], v["▁"], v["."], SEP]
    B_PER, I_PER, B_LOC, I_LOC, O = (index[t] for t in ("B-PER", "I-PER", "B-LOC", "I-LOC", "O"))
    assert labels[0].tolist() == [IGNORE, B_PER, I_PER, IGNORE, O, O, B_LOC, I_LOC, O, IGNORE, IGNORE]
    assert cut == [0]
    # max_len=6 keeps 4 pieces: john smith ##son lives; in, New, York and . lose their tags
    ids, labels, cut = encode_tagged(tok, [words], [np.array([index[t] for t in tags])], 6)
    assert ids[0].tolist() == [CLS, v["▁john"], v["▁smith"], v["##son"], v["▁lives"], SEP]
    assert labels[0].tolist() == [IGNORE, B_PER, I_PER, IGNORE, O, IGNORE] and cut == [4]


def test_a_word_without_pieces_gets_one_unk():
    # word 1 gave no piece (its characters normalised away): [UNK] in its place, labelled
    ids, labels, cut = align_first_pieces([10, 11, 12], [0, 0, 2], np.array([3, 4, 5]), 16)
    assert ids.tolist() == [CLS, 10, 11, UNK, 12, SEP]
    assert labels.tolist() == [IGNORE, 3, IGNORE, 4, 5, IGNORE] and cut == 0


def test_collate_pads_ids_with_pad_and_labels_with_ignore():
    batch = collate_tagged([(np.array([CLS, 7, SEP]), np.array([IGNORE, 1, IGNORE])),
                            (np.array([CLS, 5, 6, 8, SEP]), np.array([IGNORE, 0, IGNORE, 2, IGNORE]))])
    assert batch["input_ids"].tolist() == [[CLS, 7, SEP, PAD, PAD], [CLS, 5, 6, 8, SEP]]
    assert batch["labels"][0].tolist() == [IGNORE, 1, IGNORE, IGNORE, IGNORE]
    assert batch["attention_mask"].sum(1).tolist() == [3, 5] and not batch["segment_ids"].any()


# -- readers -----------------------------------------------------------------------------------------
CONLL = ("-DOCSTART- -X- -X- O\n\n"
         "John\tB-PER\nlives\tO\nin\tO\nNew York\tB-LOC\n\n\n"  # a tab: a token may hold a space
         "EU NNP B-NP B-ORG\nrejects VBZ B-VP O\n"  # CoNLL-2003's columns: the tag is the last
         "-DOCSTART- -X- -X- O\n"
         "Paris\tB-LOC\n")
EXPECTED = [(("John", "lives", "in", "New York"), ("B-PER", "O", "O", "B-LOC")),
            (("EU", "rejects"), ("B-ORG", "O")), (("Paris",), ("B-LOC",))]


def test_conll_reader_plain_and_gzipped(tmp_path):
    plain = tmp_path / "a.conll"
    plain.write_text(CONLL)
    packed = tmp_path / "a.conll.gz"
    with gzip.open(packed, "wt") as f:
        f.write(CONLL)
    assert read_tagged(plain, "t") == read_tagged(packed, "t") == EXPECTED
    assert tag_values(EXPECTED) == ["O", "B-LOC", "B-ORG", "B-PER"]  # sorted, O first
    assert tag_values(EXPECTED, ["B-PER", "O", "B-LOC", "B-ORG"])[0] == "B-PER"


def test_jsonl_reader_with_its_field_names(tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_text("".join(json.dumps({"words": list(w), "ner": list(t)}) + "\n" for w, t in EXPECTED)
                    + json.dumps({"words": [], "ner": []}) + "\n\n")
    assert read_tagged(path, "t", tokens_field="words", tags_field="ner") == EXPECTED


@pytest.mark.parametrize("name, text, says", [
    ("bad.conll", "John\tB-PER\nlives\n", r"bad.conll line 2 has no tag: 'lives'"),
    ("bad.conll", "John\tB-PER\nlives\t\n", r"bad.conll line 2 has no tag"),
    ("tag.conll", "John\tB-PER\n\nEU\tB-MISC\n", r"tag.conll line 3: tag='B-MISC' is not a class of "
                                                 r"data.labels \('O', 'B-PER'\)"),
    ("bad.jsonl", '{"tokens": ["a", "b"], "tags": ["O"]}\n', r"line 1 has 2 tokens but 1 tags"),
    ("bad.jsonl", '{"tokens": ["a"]}\n', r"line 1 has no tags field 'tags' .*data.tags_field"),
    ("bad.jsonl", '{"tokens": "a b", "tags": ["O"]}\n', r"line 1: 'tokens' must be a list of"),
    ("bad.jsonl", "[1]\n", r"bad.jsonl line 1 is JSON list, not an object"),
    ("empty.conll", "\n-DOCSTART-\n\n", r"empty.conll holds no sentences"),
    ("data.csv", "a,O\n", r"data.csv: unknown format"),
])
def test_bad_files_are_one_line_data_errors_naming_file_and_line(tmp_path, name, text, says):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(DataError, match=says) as err:
        TokenClassificationDataModule(train_path=str(path), val_path=str(path),
                                      labels=["O", "B-PER"]).setup()
    assert "\n" not in str(err.value) and str(err.value).startswith("data 'token_classification': ")


def test_a_dev_tag_unseen_in_training_names_the_dev_line(tmp_path):
    train, dev = tmp_path / "train.conll", tmp_path / "dev.conll"
    train.write_text("John\tB-PER\nsings\tO\n")
    dev.write_text("Anna\tB-PER\n\nRome\tB-LOC\n")
    with pytest.raises(DataError, match=r"dev.conll line 3: tag='B-LOC' is not a class of the labels "
                                        r"of .*train.conll \('O', 'B-PER'\)"):
        TokenClassificationDataModule(train_path=str(train), val_path=str(dev)).setup()
    with pytest.raises(DataError, match=r"file not found: .*nope.conll"):
        TokenClassificationDataModule(train_path=str(tmp_path / "nope.conll"),
                                      val_path=str(dev)).setup()


# -- data modules ------------------------------------------------------------------------------------
def test_generated_set_equals_its_conll_files_read_back(tmp_path):
    """data=synthetic_ner and data=conll on the files the generator writes give the same batches."""
    sizes = (120, 30, 30)
    files = write_splits(tmp_path / "ner", sizes, seed=5)
    assert [f.name for f in files] == ["train.conll", "dev.conll", "test.conll"]
    gen = SyntheticNerDataModule(train_size=120, val_size=30, test_size=30, seed=5, vocab_size=80)
    gen.set_run_dir(tmp_path / "gen")
    gen.setup()
    # (HF's WordPiece trainer breaks ties in hash order: the files' run takes the same tokenizer)
    read = TokenClassificationDataModule(train_path=str(files[0]), val_path=str(files[1]),
                                         test_path=str(files[2]), tokenizer_from=str(tmp_path / "gen"))
    read.set_run_dir(tmp_path / "read")
    read.setup()
    assert gen.rows == {s: list(v) for s, v in draw_splits(sizes, 5).items()} == read.rows
    assert gen.task_context() == read.task_context() == {"num_classes": 7, "class_names": list(TAGS)}
    assert gen.tokenizer.get_vocab() == read.tokenizer.get_vocab()
    for split in ("train", "val", "test"):
        for (a, la), (b, lb) in zip(gen.splits[split], read.splits[split]):
            assert a.tolist() == b.tolist() and la.tolist() == lb.tolist()
    art = read.artifacts()
    assert art["label_values"] == list(TAGS) and art["tokens_field"] == "tokens"
    assert (tmp_path / "read" / "tokenizer" / "wordpiece.json").is_file()
    # every sentence: one label per word, on a piece, in order
    for (ids, labels), (words, tags) in zip(gen.splits["val"], gen.rows["val"]):
        assert [TAGS[i] for i in labels[labels != IGNORE]] == list(tags)
    batch = next(iter(gen.val_dataloader()))
    assert batch["labels"].shape == batch["input_ids"].shape
    assert (batch["labels"][~batch["attention_mask"]] == IGNORE).all()
    assert gen.example_batch(3)["input_ids"].shape[0] == 3


def test_registry_fields_and_no_test_split():
    assert DATA.validate({"name": "synthetic_ner"})["max_len"] == 64
    assert DATA.get("token_classification").interface == TASKS.get("token_classification").interface
    with pytest.raises(ConfigError, match=r"max_len.*must be >= 3"):
        DATA.validate({"name": "token_classification", "max_len": 2}, "data")
    dm = SyntheticNerDataModule(test_size=0)
    assert "test_size=0" in dm.missing_test()
    with pytest.raises(ValueError, match="tag strings"):
        TokenClassificationDataModule(train_path="a", val_path="b", labels=[0, 1])


# -- entity scores -----------------------------------------------------------------------------------
TRUE = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "I-ORG", "I-ORG", "O", "B-PER"]]
PRED = [["B-PER", "I-PER", "O", "B-PER"], ["B-ORG", "I-ORG", "O", "O", "I-PER"]]


def test_entity_f1_equals_seqeval_and_a_hand_count():
    from seqeval.metrics import f1_score, precision_score, recall_score
    from seqeval.scheme import IOB2

    # true entities: PER(0,2) LOC(3) | ORG(0,3) PER(4): 4. Predicted: PER(0,2) PER(3) | ORG(0,2):
    # 3 (a lone I-PER opens none in strict IOB2). Correct: PER(0,2) only (ORG ends early).
    assert entity_counts(TRUE, PRED) == (1, 3, 4)
    p, r = 1 / 3, 1 / 4
    hand = {"precision": p, "recall": r, "f1": 2 * p * r / (p + r)}  # = 2/7
    assert entity_scores(1, 3, 4) == pytest.approx(hand) and hand["f1"] == pytest.approx(2 / 7)
    strict = {"mode": "strict", "scheme": IOB2}
    assert hand == pytest.approx({"precision": precision_score(TRUE, PRED, **strict),
                                  "recall": recall_score(TRUE, PRED, **strict),
                                  "f1": f1_score(TRUE, PRED, **strict)})
    # summed over two batches (one sentence each): the same as over both at once
    metric = EntityScore("f1")
    for t, q in zip(TRUE, PRED):
        metric.update(torch.tensor(entity_counts([t], [q])))
    assert float(metric.compute()) == pytest.approx(2 / 7)
    assert entity_scores(0, 0, 0) == {"precision": 0.0, "recall": 0.0, "f1": 0.0}


def test_word_tags_reads_the_labelled_positions_only():
    names = ["O", "B-PER", "I-PER"]
    target = torch.tensor([[IGNORE, 1, IGNORE, 2, IGNORE], [IGNORE, 0, 1, IGNORE, IGNORE]])
    pred = torch.tensor([[0, 1, 0, 0, 2], [1, 0, 2, 2, 2]])
    assert word_tags(pred, target, names) == ([["B-PER", "I-PER"], ["O", "B-PER"]],
                                              [["B-PER", "O"], ["O", "I-PER"]])


# -- the task ----------------------------------------------------------------------------------------
class StandIn(nn.Module):
    """The model contract: hidden states (B, T, d) and ``token_logits``."""

    head = "token"

    def __init__(self, vocab=20, d=5, classes=3):
        super().__init__()
        self.emb, self.cls = nn.Embedding(vocab, d), nn.Linear(d, classes)

    def forward(self, input_ids, segment_ids, attention_mask):
        return self.emb(input_ids)

    def token_logits(self, hidden):
        return self.cls(hidden)


def test_task_loss_is_cross_entropy_over_first_pieces_and_logs_entity_scores():
    torch.manual_seed(0)
    names = ["O", "B-PER", "I-PER"]
    task = TokenClassificationTask(StandIn(), 3, names)
    logs = {}
    task.log = lambda name, value, batch_size=None, **kw: logs.__setitem__(name, (value, batch_size))
    ids = torch.tensor([[CLS, 7, 8, 9, SEP], [CLS, 10, SEP, PAD, PAD]])
    labels = torch.tensor([[IGNORE, 1, IGNORE, 2, IGNORE], [IGNORE, 0, IGNORE, IGNORE, IGNORE]])
    batch = {"input_ids": ids, "segment_ids": torch.zeros_like(ids), "attention_mask": ids != PAD,
             "labels": labels}
    loss = task.step(batch, "val")
    with torch.no_grad():
        logits = task.model.cls(task.model.emb(ids))
    picked = [(0, 1, 1), (0, 3, 2), (1, 1, 0)]  # (row, position, tag) of the labelled positions
    hand = sum(math.log(sum(math.exp(v) for v in logits[b, t].tolist())) - float(logits[b, t, y])
               for b, t, y in picked) / 3
    assert float(loss.detach()) == pytest.approx(hand, rel=1e-5)
    pred = logits.argmax(-1)
    acc = sum(int(pred[b, t]) == y for b, t, y in picked) / 3
    assert float(logs["val/acc"][0].compute()) == pytest.approx(acc) and logs["val/loss"][1] == 3
    true, guess = word_tags(pred, labels, names)
    expect = entity_scores(*entity_counts(true, guess))
    for score in ("precision", "recall", "f1"):
        assert float(logs[f"val/{score}"][0].compute()) == pytest.approx(expect[score])
    assert TokenClassificationTask.monitor == "val/f1"


def test_task_refuses_tags_that_are_not_iob2():
    with pytest.raises(ConfigError, match=r"'NOUN', 'VERB' are not IOB2"):
        TokenClassificationTask(StandIn(), 3, ["O", "NOUN", "VERB"])
