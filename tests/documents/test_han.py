"""HAN: sentence and document vectors are the hand-computed weighted sums; padding gets zero
weight; empty documents and sentences do not crash; the ablations are one override."""

import numpy as np
import torch

from attnflow.data.documents import collate_documents
from attnflow.models.han import HierarchicalAttentionNetwork
from attnflow.config.registry import MODELS


def _batch():
    # doc 0: sentences of 2 and 3 words; doc 1: empty; doc 2: one sentence of 1 word
    return collate_documents([(np.array([3, 4, 5, 6, 7]), np.array([2, 3]), 1),
                              (np.zeros(0, np.int64), np.zeros(0, np.int64), 0),
                              (np.array([8]), np.array([1]), 0)])


def _model(**kw):
    torch.manual_seed(0)
    return MODELS.build({"name": "han", "embed_dim": 6,
                         "word_encoder": {"name": "rnn", "hidden_dim": 4},
                         "sentence_encoder": {"name": "rnn", "hidden_dim": 4},
                         "word_pooling": {"name": "attention", "dim": 5},
                         "sentence_pooling": {"name": "attention", "dim": 5}, **kw},
                        vocab_size=10, num_classes=2)


def test_sentence_vector_is_hand_computed_weighted_sum():
    m = _model().eval()
    b = _batch()
    # the word encoder on sentence 1 of doc 0 alone, then Yang et al. 2016's eq. (5)–(7) by hand
    x = m.embedding(torch.tensor([[5, 6, 7]]))
    h, _ = m.word_encoder(x, torch.tensor([3]))
    h = h[0]
    u = torch.tanh(h @ m.word_pooling.proj.weight.T + m.word_pooling.proj.bias)
    scores = [float((u[t] @ m.word_pooling.query).detach()) for t in range(3)]
    e = [np.exp(s) for s in scores]
    alpha = [v / sum(e) for v in e]
    s_hand = sum(alpha[t] * h[t] for t in range(3))
    s, word_w = m.sentence_vectors(b["tokens"], b["sent_lengths"])
    assert torch.allclose(s[0, 1], s_hand, atol=1e-5)
    assert torch.allclose(word_w[0, 1, :3], torch.tensor(alpha, dtype=torch.float32), atol=1e-5)
    # the document vector: the same formula one level up
    out = m(b["tokens"], b["sent_lengths"])
    hs, _ = m.sentence_encoder(s[:1], torch.tensor([2]))
    us = torch.tanh(hs[0] @ m.sentence_pooling.proj.weight.T + m.sentence_pooling.proj.bias)
    beta = torch.softmax(us @ m.sentence_pooling.query, 0)
    v = (beta.unsqueeze(-1) * hs[0]).sum(0)
    assert torch.allclose(out["sent_weights"][0], beta, atol=1e-5)
    assert torch.allclose(out["logits"][0], m.classifier(v), atol=1e-5)


def test_padding_gets_zero_weight_and_empty_document_is_finite():
    m = _model()
    b = _batch()
    out = m(b["tokens"], b["sent_lengths"])
    word_mask = torch.arange(b["tokens"].shape[-1]) < b["sent_lengths"].unsqueeze(-1)
    assert torch.all(out["word_weights"][~word_mask] == 0)
    assert torch.all(out["sent_weights"][b["sent_lengths"] == 0] == 0)
    assert torch.allclose(out["sent_weights"].sum(-1), torch.tensor([1.0, 0.0, 1.0]))
    assert torch.isfinite(out["logits"]).all()
    out["logits"].sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in m.parameters() if p.grad is not None)


def test_length_groups_do_not_change_the_result():
    b = _batch()
    a = _model(length_groups=1).eval()(b["tokens"], b["sent_lengths"])["logits"]
    c = _model(length_groups=3).eval()(b["tokens"], b["sent_lengths"])["logits"]
    assert torch.allclose(a, c, atol=1e-6)


def test_ablations_swap_pooling():
    m = MODELS.build({"name": "han", "word_pooling": {"name": "mean"}, "sentence_pooling": {"name": "max"}},
                     vocab_size=10, num_classes=3)
    b = _batch()
    out = m(b["tokens"], b["sent_lengths"])
    assert out["logits"].shape == (3, 3) and out["sent_weights"] is None
    assert isinstance(m, HierarchicalAttentionNetwork)
