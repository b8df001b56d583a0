"""The synthetic data module: targets, held-out splits, batches."""

from __future__ import annotations

import pytest

from attnflow.data.synthetic import BOS, EOS, PAD, ReverseDataModule, collate, target_of


def test_reverse_targets_and_held_out_splits():
    dm = ReverseDataModule(train_size=3000, val_size=300, test_size=300, symbols=4, min_len=3, max_len=6)
    dm.setup()
    train = {x for x, _ in dm.splits["train"]}
    val = [x for x, _ in dm.splits["val"]]
    test = [x for x, _ in dm.splits["test"]]
    assert not train & set(val) and not train & set(test) and not set(val) & set(test)
    assert len(set(val)) == len(val) == 300
    for x, y in dm.splits["train"][:50]:
        assert 3 <= len(x) <= 6 and list(y) == list(reversed(x))
        assert all(3 <= t < 7 for t in x)


def test_same_seed_same_data_other_seed_other_data():
    a, b, c = (ReverseDataModule(train_size=50, val_size=5, test_size=5, seed=s) for s in (1, 1, 2))
    for dm in (a, b, c):
        dm.setup()
    assert a.splits == b.splits and a.splits != c.splits


@pytest.mark.parametrize("task, expect", [("copy", [5, 3, 4]), ("sort", [3, 4, 5])])
def test_other_tasks(task, expect):
    assert list(target_of(task, (5, 3, 4))) == expect


def test_collate_pads_and_frames_targets():
    b = collate([((3, 4, 5), (5, 4, 3)), ((6,), (6,))])
    assert b["src"].tolist() == [[3, 4, 5], [6, PAD, PAD]]
    assert b["src_lengths"].tolist() == [3, 1]
    assert b["tgt_in"].tolist() == [[BOS, 5, 4, 3], [BOS, 6, PAD, PAD]]
    assert b["tgt_out"].tolist() == [[5, 4, 3, EOS], [6, EOS, PAD, PAD]]


def test_impossible_sizes_fail_with_a_message():
    dm = ReverseDataModule(symbols=2, min_len=1, max_len=1, train_size=1, val_size=10, test_size=1)
    with pytest.raises(ValueError, match="cannot draw 10 distinct val sequences"):
        dm.setup()
