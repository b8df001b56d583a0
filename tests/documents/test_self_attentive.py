"""Self-attentive model: flattening, hop weights, and the penalty ‖AAᵀ − I‖²_F."""

import numpy as np
import pytest
import torch

from attnflow.blocks.attention.penalty import diversity_penalty
from attnflow.data.documents import collate_documents
from attnflow.models.self_attentive import flatten_documents
from attnflow.config.registry import MODELS


def _batch():
    return collate_documents([(np.array([3, 4, 5, 6, 7]), np.array([2, 3]), 1),
                              (np.zeros(0, np.int64), np.zeros(0, np.int64), 0)])


def test_flatten_packs_words_in_order():
    b = _batch()
    flat, lengths, _, keep = flatten_documents(b["tokens"], b["sent_lengths"])
    assert flat.tolist() == [[3, 4, 5, 6, 7], [0, 0, 0, 0, 0]] and lengths.tolist() == [5, 0]
    assert keep.sum().item() == 5


def test_hops_sum_to_one_and_map_back():
    torch.manual_seed(0)
    m = MODELS.build({"name": "self_attentive", "embed_dim": 6, "hops": 3, "attn_dim": 4, "mlp_dim": 8,
                      "encoder": {"name": "rnn", "cell": "lstm", "hidden_dim": 4}},
                     vocab_size=10, num_classes=2)
    b = _batch()
    out = m(b["tokens"], b["sent_lengths"])
    A = out["attention"]
    assert A.shape == (2, 3, 5)
    assert torch.allclose(A[0].sum(-1), torch.ones(3), atol=1e-6) and torch.all(A[1] == 0)
    # word weights: mean over hops, at the hierarchical positions
    mean = A[0].mean(0)
    ww = out["word_weights"][0]
    assert torch.allclose(torch.cat([ww[0, :2], ww[1, :3]]), mean, atol=1e-6)
    assert ww[0, 2] == 0
    assert torch.isfinite(out["logits"]).all()


def test_penalty_zero_for_orthogonal_one_hot_rows_positive_otherwise():
    one_hot = torch.tensor([[[1.0, 0, 0, 0], [0, 0, 1.0, 0]]])
    assert diversity_penalty(one_hot).item() == 0.0
    same = torch.tensor([[[0.5, 0.5, 0, 0], [0.5, 0.5, 0, 0]]])
    # AAᵀ = [[.5,.5],[.5,.5]], minus I: (−.5)²·2 + (.5)²·2 = 1
    assert abs(diversity_penalty(same).item() - 1.0) < 1e-6
    assert diversity_penalty(torch.softmax(torch.randn(2, 3, 6), -1)).item() > 0


@pytest.mark.slow
def test_the_penalty_weight_of_a_model_without_hops_warns():
    """HAN returns word and sentence weights, no hops: its penalty_weight is unread."""
    import warnings

    from support import compose_cfg

    from attnflow.config.registry import AttnflowWarning
    from attnflow.training.validate import resolve_config

    b = _batch()
    han = MODELS.build({"name": "han", "embed_dim": 6, "word_encoder": {"name": "rnn", "hidden_dim": 4},
                        "sentence_encoder": {"name": "rnn", "hidden_dim": 4}}, vocab_size=10, num_classes=2)
    hops = MODELS.build({"name": "self_attentive", "embed_dim": 6, "hops": 3, "attn_dim": 4, "mlp_dim": 8,
                         "encoder": {"name": "rnn", "cell": "lstm", "hidden_dim": 4}},
                        vocab_size=10, num_classes=2)
    assert "attention" not in han(b["tokens"], b["sent_lengths"])  # what the penalty reads
    assert "attention" in hops(b["tokens"], b["sent_lengths"])
    for overrides in (["experiment=han_imdb", "task.penalty_weight=0.1"],
                      ["experiment=self_attentive_imdb", "model=han"]):  # the preset's 0.3
        with pytest.warns(AttnflowWarning, match="penalty_weight=0.[13] is unread: model 'han'"):
            resolve_config(compose_cfg(overrides))
    with warnings.catch_warnings():
        warnings.filterwarnings("error", "task.penalty_weight", AttnflowWarning)
        resolve_config(compose_cfg(["experiment=self_attentive_imdb", "task.penalty_weight=0.1"]))
        resolve_config(compose_cfg(["experiment=han_imdb", "task.penalty_weight=0"]))
