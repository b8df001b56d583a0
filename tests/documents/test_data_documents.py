"""The documents data module: cleaning, splitting, caps and their counts, masks, bad input."""

import gzip
import json

import pytest
import torch

from attnflow.data.documents import DocumentDataModule, clean, collate_documents, tokenize


def _write(path, rows):
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "wt", encoding="utf-8") as f:
        for r in rows:
            f.write((r if isinstance(r, str) else json.dumps(r)) + "\n")
    return path


ROWS = [
    {"text": "Great film. I loved it!<br /><br />The end", "label": 1, "rating": 9},
    {"text": "", "label": 0, "rating": 2},                      # empty document
    {"text": "Bad bad bad. Awful acting. Boring plot. Terrible. Worst.", "label": 0, "rating": 1},
    {"text": "<br /><br />   ...   ", "label": 1, "rating": 10},  # markup and dots only
]


def test_cleaning_and_tokenising():
    assert "<br" not in clean("a<br />b<i>c</i>")
    assert tokenize("Great film. I loved it!<br /><br />The end") == [
        ["great", "film", "."], ["i", "loved", "it", "!"], ["the", "end"]]
    assert tokenize("") == [] and tokenize("<br /><br />") == []
    # only real tags go: "<3" and comparisons are text; entities are decoded
    assert clean("10/10 <3 and the acting was > the plot") == "10/10 <3 and the acting was > the plot"
    assert clean("a < b and <i>c</i> &quot;d&quot; &amp; e") == 'a < b and c "d" & e'
    # Unicode words and typographic apostrophes stay whole
    assert tokenize("A naïve café, don’t!") == [["a", "naïve", "café", ",", "don’t", "!"]]


def test_hierarchical_batch_masks_caps_and_counts(tmp_path):
    train = _write(tmp_path / "train.jsonl.gz", ROWS)
    dm = DocumentDataModule(train_path=str(train), val_path=str(train), test_path=str(tmp_path / "absent.jsonl"),
                            max_sentences=3, max_words=2, min_freq=1, batch_size=4, bucket=False)
    dm.setup()
    assert not dm.has_test
    st = dm.stats["train"]
    # doc 0: sentences of 3, 4, 2 words -> 1 + 2 cut; doc 2: 4, 3, 3, 2, 2 words -> the last two
    # sentences (2 + 2 words) cut, then 2 + 1 + 1 words; doc 3: one sentence '. . .' -> 1 cut
    assert st["sentences_cut"] == 2 and st["empty_documents"] == 1
    assert st["words_cut"] == (1 + 2) + (2 + 2) + (2 + 1 + 1) + 1
    b = collate_documents([dm.splits["val"][i] for i in range(4)])  # in file order
    assert sorted(dm.val_dataloader().sampler) == [0, 1, 2, 3]  # the loader: each document once
    assert b["tokens"].shape == (4, 3, 2)
    assert b["doc_lengths"].tolist() == [3, 0, 3, 1]
    assert b["sent_lengths"][1].tolist() == [0, 0, 0]
    word_mask = torch.arange(2) < b["sent_lengths"].unsqueeze(-1)
    assert torch.all(b["tokens"][~word_mask] == 0) and torch.all(b["tokens"][word_mask] > 0)
    itos = dm.vocab.itos
    assert [itos[i] for i in b["tokens"][0, 0].tolist()] == ["great", "film"]
    with pytest.raises(ValueError, match="no test split"):
        dm.test_dataloader()


def test_label_field_is_configurable(tmp_path):
    train = _write(tmp_path / "t.jsonl", ROWS)
    dm = DocumentDataModule(train_path=str(train), val_path=str(train), label_field="rating", min_freq=1)
    ctx = dm.task_context()
    assert ctx["num_classes"] == 4 and ctx["class_names"] == ["1", "2", "9", "10"]
    assert dm.splits["train"].labels == [2, 1, 0, 3]


def test_bad_input_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing.jsonl"):
        DocumentDataModule(train_path=str(tmp_path / "missing.jsonl"), val_path="x").setup()
    bad = _write(tmp_path / "bad.jsonl", [{"text": "a", "label": 1}, {"text": "b"}])
    with pytest.raises(ValueError, match=r"line 2 has no label field 'label'"):
        DocumentDataModule(train_path=str(bad), val_path=str(bad)).setup()
    broken = _write(tmp_path / "broken.jsonl", ['{"text": "a", "label": 1}', "{not json"])
    with pytest.raises(ValueError, match=r"broken.jsonl line 2 is not valid JSON"):
        DocumentDataModule(train_path=str(broken), val_path=str(broken)).setup()
    with pytest.raises(ValueError, match="'val_path' is required"):
        DocumentDataModule(train_path=str(bad))


def test_a_text_that_is_not_a_string_is_named_with_its_line(tmp_path):
    from attnflow.data.errors import DataError

    odd = _write(tmp_path / "odd.jsonl", [{"text": "a good film", "label": 1}, {"text": 5, "label": 0}])
    with pytest.raises(DataError, match=r"odd.jsonl line 2: the text field 'text' holds int 5, not a string"):
        DocumentDataModule(train_path=str(odd), val_path=str(odd)).setup()
    empty = _write(tmp_path / "null.jsonl", [{"text": "a good film", "label": 1}, {"text": None, "label": 0}])
    dm = DocumentDataModule(train_path=str(empty), val_path=str(empty), min_freq=1)
    dm.setup()  # a null text is an empty document, as before
    assert list(dm.splits["train"].labels) == [1, 0]


def test_limit_draws_a_seeded_subset_of_both_classes(tmp_path):
    rows = [{"text": f"doc {i}.", "label": int(i >= 50)} for i in range(100)]  # sorted by label
    path = _write(tmp_path / "sorted.jsonl", rows)
    dm = DocumentDataModule(train_path=str(path), val_path=str(path), limit_val=20, min_freq=1)
    dm.setup()
    labels = dm.splits["val"].labels
    assert len(labels) == 20 and 0 < sum(labels) < 20


def test_evaluation_walks_a_label_sorted_split_in_one_seeded_order(tmp_path):
    """IMDB's files are sorted by label: walked in file order, the first validation batches were
    one class, so limit_val_batches scored acc 1.0. The order is a fixed permutation (data.seed):
    every item once, the same on every call, another with another seed."""
    rows = [{"text": f"doc {i}.", "label": int(i >= 50)} for i in range(100)]  # sorted by label
    path = _write(tmp_path / "sorted.jsonl", rows)

    def order(seed):
        dm = DocumentDataModule(train_path=str(path), val_path=str(path), min_freq=1, batch_size=10,
                                seed=seed)
        batches = list(dm.val_dataloader())
        return [int(y) for b in batches for y in b["labels"]], list(dm.val_dataloader().sampler)

    labels, walk = order(0)
    assert sorted(walk) == list(range(100)) and walk != list(range(100))
    assert labels == [rows[i]["label"] for i in walk]
    assert 0 < sum(labels[:10]) < 10  # the first batch holds both classes
    assert order(0)[1] == walk and order(1)[1] != walk
