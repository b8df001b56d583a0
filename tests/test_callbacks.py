"""A callback field that the rest of its entry leaves unread is one warning line."""

from __future__ import annotations

import warnings

import pytest

from attnflow.config.registry import TASKS, AttnflowWarning
from attnflow.viz.panels import AttentionMaps
from attnflow.training.run import build_callbacks

TASK = TASKS.get("seq2seq")


def _unread(make) -> list:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        make()
    return [str(w.message) for w in caught if issubclass(w.category, AttnflowWarning)]


@pytest.mark.parametrize("entry, average, warned", [
    ({"save_top_k": 0, "mode": "max"}, None, True),
    ({"save_top_k": 0, "mode": None}, None, False),  # the default: nothing to say
    ({"save_top_k": 1, "mode": "max"}, None, False),  # it ranks the top-k
    ({"save_top_k": 0, "mode": "max", "monitor": "val/loss"}, None, False),
    ({"save_top_k": 0, "mode": "max"}, {"best": 2}, False),  # callbacks.average ranks by it
])
def test_checkpoint_mode_without_ranking_is_one_warning(tmp_path, entry, average, warned):
    got = _unread(lambda: build_callbacks({"checkpoint": entry, "average": average,
                                           "progress_bar": "none"}, tmp_path, TASK))
    expected = ["callbacks.checkpoint.mode=max is unread: save_top_k=0 ranks nothing"]
    assert got == (expected if warned else [])


@pytest.mark.parametrize("examples, every, warned", [(0, 3, True), (0, 1, False), (2, 3, False)])
def test_attention_maps_every_n_epochs_without_examples_is_one_warning(tmp_path, examples, every,
                                                                       warned):
    got = _unread(lambda: AttentionMaps(tmp_path, examples=examples, every_n_epochs=every))
    expected = [f"callbacks.attention_maps.every_n_epochs={every} is unread: examples=0 draws no maps"]
    assert got == (expected if warned else [])
