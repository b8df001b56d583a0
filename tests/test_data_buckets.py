"""Length-bucketed batches (attnflow/data/buckets.py)."""

from attnflow.data.buckets import BucketBatchSampler


def test_bucketing_groups_lengths_and_covers_everything():
    lengths = [(i * 37) % 50 for i in range(1000)]
    s = BucketBatchSampler(lengths, 10, shuffle=True, seed=0)
    batches = list(s)
    assert sorted(i for b in batches for i in b) == list(range(1000))
    spread = sum(max(lengths[i] for i in b) - min(lengths[i] for i in b) for b in batches) / len(batches)
    assert spread <= 2  # random batches would span ~45
    assert list(s) != batches  # a new order each epoch
    assert len(s) == 100


def test_unshuffled_is_sorted_and_complete():
    lengths = [5, 1, 4, 1, 3]
    assert list(BucketBatchSampler(lengths, 2, shuffle=False)) == [[1, 3], [4, 2], [0]]


def test_a_resumed_run_continues_with_the_order_of_its_epoch():
    """The order depends on the trainer's epoch, not on how often this sampler object was
    iterated: a sampler built after resuming at epoch 3 gives epoch 3's order."""
    lengths = [(i * 13) % 40 for i in range(300)]
    fresh = BucketBatchSampler(lengths, 8, seed=5, pool=4)
    orders = [list(fresh) for _ in range(4)]
    epoch = {"now": 3}
    resumed = BucketBatchSampler(lengths, 8, seed=5, pool=4, epoch=lambda: epoch["now"])
    assert list(resumed) == orders[3]
    epoch["now"] = 0
    assert list(resumed) == orders[0]
    detached = BucketBatchSampler(lengths, 8, seed=5, pool=4, epoch=lambda: None)  # no trainer
    assert [list(detached) for _ in range(2)] == orders[:2]
