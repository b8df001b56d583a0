"""Jain & Wallace (2019) diagnostics (attnflow.compare.jain_wallace): τ against a brute-force pair
count, the permutations' invariants, and per family the TVD and τ of untrained runs against
hand-written forwards that permute (or detach) the same weights with the same random draws."""

from __future__ import annotations

import itertools
import math
import random
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from attnflow.blocks.normalizers.softmax import masked_softmax
from attnflow.compare.jain_wallace import jain_wallace, kendall_tau, total_variation
from attnflow.compare.loading import load_task
from attnflow.compare.tampered import permute_rows, permute_segments, tampered
from attnflow.config.registry import MODELS, POOLINGS
from attnflow.models.han import encode_masked
from attnflow.models.self_attentive import flatten_documents
from cli_runs import (GRAPH, QUIET, document_files, document_overrides, fabricate_run,  # noqa: F401
                      one_torch_thread, write_jsonl)

P, SEED = 3, 7


def brute_tau(a, b) -> float:
    """τ-b by counting pairs: (n_c − n_d) / √((n₀ − n₁)(n₀ − n₂))."""
    nc = nd = ta = tb = 0
    for i, j in itertools.combinations(range(len(a)), 2):
        da, db = np.sign(a[i] - a[j]), np.sign(b[i] - b[j])
        ta, tb = ta + (da == 0), tb + (db == 0)
        nc, nd = nc + (da * db > 0), nd + (da * db < 0)
    n0 = len(a) * (len(a) - 1) / 2
    return (nc - nd) / math.sqrt((n0 - ta) * (n0 - tb))


def median_tvd(base, permuted_probs) -> np.ndarray:
    return np.median(np.stack([total_variation(base, p).numpy() for p in permuted_probs]), 0)


def check_result(result, taus, tvds, permuted: str):
    """``result`` against per-example τ (brute force) and TVD computed by hand."""
    got = [e["kendall_tau"] for e in result["examples"]]
    np.testing.assert_allclose(got, taus, atol=1e-6)
    np.testing.assert_allclose([e["tvd"] for e in result["examples"]], tvds, rtol=1e-3, atol=1e-6)
    assert result["kendall_tau"] == pytest.approx(float(np.nanmedian(taus)), abs=1e-6)
    assert result["tvd"] == pytest.approx(float(np.median(tvds)), rel=1e-3, abs=1e-7)
    assert max(tvds) > 0 and permuted in result["permuted"]


# -- the statistics and the permutations ------------------------------------------------------------
def test_kendall_tau_is_tau_b_of_a_brute_force_pair_count():
    rng = np.random.default_rng(0)
    for _ in range(5):
        a, b = rng.integers(0, 4, 9).astype(float), rng.normal(size=9)  # ties in a
        assert kendall_tau(a, b) == pytest.approx(brute_tau(a, b), abs=1e-12)
    assert math.isnan(kendall_tau([0.3], [1.0]))
    assert math.isnan(kendall_tau([0.5, 0.5, 0.5], [1.0, 2.0, 3.0]))


def test_permute_rows_keeps_each_rows_multiset_and_zero_padding():
    g = torch.Generator().manual_seed(0)
    lengths = torch.tensor([5, 3, 1, 0])
    mask = (torch.arange(6) < lengths[:, None])[:, None, None, :]          # (B, 1, 1, T)
    w = masked_softmax(torch.randn(4, 2, 6, 6), mask)                     # (B, J, T, T)
    out = permute_rows(w, mask, g)
    assert torch.equal(out[~mask.expand_as(w)], torch.zeros_like(out[~mask.expand_as(w)]))
    assert torch.equal(out.sort(-1).values, w.sort(-1).values)  # each row: the same weights
    assert not torch.equal(out[0], w[0])                        # … elsewhere
    again = permute_rows(w, mask, torch.Generator().manual_seed(0))
    assert torch.equal(out, again)


def test_permute_segments_stays_within_each_segment_per_head():
    g = torch.Generator().manual_seed(0)
    index = torch.tensor([2, 0, 2, 1, 0, 2, 2, 0, 3])
    w = torch.rand(9, 3)
    out = permute_segments(w, index, g)
    for s in range(4):
        here = index == s
        assert torch.equal(out[here].sort(0).values, w[here].sort(0).values)
    assert not torch.equal(out, w) and not torch.equal(out[:, 0] - w[:, 0], out[:, 1] - w[:, 1])


def test_wrapper_permutes_only_chosen_rows_detaches_and_is_removed_even_on_error():
    torch.manual_seed(0)
    block = MODELS.build({"name": "bert", "d_model": 8, "layers": 1, "ffn_dim": 8,
                          "attention": {"name": "multihead", "heads": 2}, "head": "sequence"},
                         vocab_size=20, num_classes=2).encoder.layers[0].self_attn
    own = block.normalizer
    x, mask = torch.randn(2, 5, 8), (torch.arange(5) < torch.tensor([[5], [3]]))[:, None]
    _, before = block(x, x, x, mask, need_weights=True)
    with tampered([(block, (0,))], "permute", torch.Generator().manual_seed(1)):
        _, after = block(x, x, x, mask, need_weights=True)
    assert torch.equal(after[:, :, 1:], before[:, :, 1:]) and not torch.equal(after, before)
    assert torch.equal(after[:, :, 0].sort(-1).values, before[:, :, 0].sort(-1).values)
    pooling = POOLINGS.build({"name": "attention", "dim": 4}, 3)
    h = torch.randn(2, 4, 3, requires_grad=True)
    with tampered([(pooling, None)], "detach") as (wrapper,):
        pooling(h)[0].sum().backward()
    assert pooling.query.grad is None and len(wrapper.records) == 1   # α cut from the graph
    assert torch.equal(h.grad, wrapper.records[0][0].unsqueeze(-1).expand_as(h))  # ∂Σαh/∂h = α
    with pytest.raises(RuntimeError), tampered([(block, None)], "detach"):
        raise RuntimeError("inside")
    assert block.normalizer is own


def test_models_without_diagnosed_attention_give_none():
    han = MODELS.build({"name": "han", "embed_dim": 4, "word_pooling": {"name": "mean"},
                        "word_encoder": {"name": "rnn", "hidden_dim": 2},
                        "sentence_encoder": {"name": "rnn", "hidden_dim": 2}},
                       vocab_size=10, num_classes=2)
    assert han.diagnosed_attention() == []
    assert jain_wallace(SimpleNamespace(model=han, interface="documents"), {}) is None
    translation = SimpleNamespace(model=torch.nn.Linear(2, 2), interface="translation")
    assert jain_wallace(translation, {}) is None
    bert = MODELS.build({"name": "bert", "d_model": 8, "layers": 1, "ffn_dim": 8,
                         "attention": {"name": "multihead", "heads": 2}}, vocab_size=20)
    assert bert.diagnosed_attention() == []  # head 'pretraining'


def test_self_attentive_normaliser_is_a_module_with_softmax_numerics_and_no_state():
    torch.manual_seed(0)
    m = MODELS.build({"name": "self_attentive", "embed_dim": 6, "hops": 3, "attn_dim": 4,
                      "mlp_dim": 8, "encoder": {"name": "rnn", "cell": "lstm", "hidden_dim": 4}},
                     vocab_size=10, num_classes=2)
    assert m.normalizer.registry_name == "softmax"
    assert not any("normalizer" in k for k in m.state_dict())
    H, keep = torch.randn(2, 5, 8), torch.arange(5) < torch.tensor([[5], [2]])
    A, M = m.attend(H, keep)
    expected = masked_softmax(m.ws2(torch.tanh(m.ws1(H))).transpose(1, 2), keep[:, None])
    assert torch.equal(A, expected) and torch.equal(M, expected @ H)


# -- runs of every family ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("jw_runs")
    docs = document_files(base / "docs")
    rng = random.Random(0)
    words = "good bad great awful the film was a and it story".split()
    texts = [" ".join(rng.choice(words) for _ in range(rng.randint(4, 9))) for _ in range(20)]
    write_jsonl(base / "texts.jsonl", [{"text": t, "label": ["neg", "pos"][i % 2]}
                                       for i, t in enumerate(texts)])
    bert = ["experiment=bert_imdb", f"data.train_path={base}/texts.jsonl",
            f"data.val_path={base}/texts.jsonl", "data.test_path=", "data.max_len=16",
            "data.labels=[neg,pos]", "model.d_model=16", "model.layers=2", "model.ffn_dim=32",
            "attention.heads=2", "model.init_std=0.5", "data.vocab_size=120", *QUIET]
    graph = [*GRAPH, "data.num_nodes=40", "data.p_in=0.4", "data.p_out=0.05", "model.out_heads=2"]
    return {"han": fabricate_run(document_overrides(docs) + ["pooling.init_std=2.0"], base / "han"),
            "sa": fabricate_run(document_overrides(docs, "self_attentive_imdb"), base / "sa"),
            "bert": fabricate_run(bert, base / "bert"), "gat": fabricate_run(graph, base / "gat")}


def _pool(pooling, h, mask, tamper):
    """Attention pooling by hand (dot scorer: u_tᵀq), the weights through ``tamper``."""
    assert pooling.scorer.registry_name == "dot"
    scores = torch.tanh(pooling.proj(h)) @ pooling.query
    alpha = tamper(torch.softmax(scores.masked_fill(~mask, -math.inf), -1).nan_to_num(0.0), mask)
    return (alpha.unsqueeze(-1) * h).sum(-2), alpha


def _han_by_hand(model, batch, tamper):
    """HAN's forward (Yang et al. 2016) with both poolings by hand: (probs, embedding leaf,
    word α (B, S, W), sentence α (B, S))."""
    tokens, lengths = batch["tokens"], batch["sent_lengths"]
    B, S, W = tokens.shape
    leaf = model.embedding(tokens.view(B * S, W)).detach().requires_grad_()
    h = encode_masked(model.word_encoder, leaf, lengths.view(-1))
    s, alpha = _pool(model.word_pooling, h, torch.arange(W) < lengths.view(-1, 1), tamper)
    sent_mask = lengths > 0
    hs = encode_masked(model.sentence_encoder, s.view(B, S, -1), sent_mask.sum(-1))
    v, beta = _pool(model.sentence_pooling, hs, sent_mask, tamper)
    return torch.softmax(model.classifier(v), -1), leaf, alpha.view(B, S, W), beta


def _importance(probs, leaf):
    grad = torch.autograd.grad(probs.max(-1).values.sum(), leaf)[0]
    return (grad * leaf).sum(-1).abs().detach()


def _permuting(seed):
    g = torch.Generator().manual_seed(seed)
    return lambda w, mask: permute_rows(w, mask, g)


def test_han_tau_and_tvd_against_a_hand_written_forward(runs):
    task, dm, _ = load_task(runs["han"])
    batch = dm.example_batch(4)
    logits = task(batch)["logits"]
    own = (task.model.word_pooling.normalizer, task.model.sentence_pooling.normalizer)
    result = jain_wallace(task, batch, permutations=P, seed=SEED)
    probs, leaf, alpha, beta = _han_by_hand(task.model, batch, lambda w, m: w.detach())
    g = _importance(probs, leaf).view(alpha.shape)
    effective = alpha * beta.unsqueeze(-1)
    valid = torch.arange(alpha.shape[-1]) < batch["sent_lengths"][..., None]
    taus = [brute_tau(effective[b][valid[b]].numpy(), g[b][valid[b]].numpy()) for b in range(4)]
    with torch.no_grad():
        base = _han_by_hand(task.model, batch, lambda w, m: w)[0]
        permuting = _permuting(SEED)
        tvds = median_tvd(base, [_han_by_hand(task.model, batch, permuting)[0] for _ in range(P)])
    check_result(result, taus, tvds, "word attention within each sentence")
    # the model's own normalisers are back: the same outputs as before
    assert (task.model.word_pooling.normalizer, task.model.sentence_pooling.normalizer) == own
    assert torch.equal(task(batch)["logits"], logits)
    assert jain_wallace(task, batch, permutations=P, seed=SEED) == result


def _self_attentive_by_hand(model, batch, tamper):
    """Lin et al. (2017) by hand: (probs, embedding leaf of the flat words, A (B, r, N), keep)."""
    flat, lengths, _, keep = flatten_documents(batch["tokens"], batch["sent_lengths"])
    leaf = model.embedding(flat).detach().requires_grad_()
    assert bool((lengths > 0).all())
    H, _ = model.encoder(leaf, lengths)
    scores = model.ws2(torch.tanh(model.ws1(H))).transpose(1, 2)
    A = tamper(torch.softmax(scores.masked_fill(~keep[:, None], -math.inf), -1), keep[:, None])
    return torch.softmax(model.mlp((A @ H).flatten(1)), -1), leaf, A, keep


def test_self_attentive_tau_is_the_mean_over_hops_and_tvd_permutes_every_hop(runs):
    task, dm, _ = load_task(runs["sa"])
    batch = dm.example_batch(4)
    result = jain_wallace(task, batch, permutations=P, seed=SEED)
    probs, leaf, A, keep = _self_attentive_by_hand(task.model, batch, lambda w, m: w.detach())
    g = _importance(probs, leaf)
    taus = [np.mean([brute_tau(hop[keep[b]].numpy(), g[b][keep[b]].numpy()) for hop in A[b]])
            for b in range(4)]
    with torch.no_grad():
        base = _self_attentive_by_hand(task.model, batch, lambda w, m: w)[0]
        permuting = _permuting(SEED)
        tvds = median_tvd(base, [_self_attentive_by_hand(task.model, batch, permuting)[0]
                                 for _ in range(P)])
    check_result(result, taus, tvds, "each attention hop")


def _bert_by_hand(model, batch, tamper):
    """BERT (Devlin et al. 2019) with the last layer by hand, its ⟨CLS⟩ row through ``tamper``:
    (probs, token-embedding leaf, ⟨CLS⟩ rows (B, J, T), mask (B, T))."""
    ids, real = batch["input_ids"], batch["attention_mask"].bool()
    leaf = model.token_embedding(ids).detach().requires_grad_()
    h = model.embedding_norm(model.positional(leaf + model.segment_embedding(batch["segment_ids"])))
    for layer in model.encoder.layers[:-1]:
        h = layer(h, real[:, None])
    last = model.encoder.layers[-1]
    attn = last.self_attn
    q, k, v = (x.unflatten(-1, (attn.heads, -1)).transpose(1, 2)
               for x in (attn.q_proj(h), attn.k_proj(h), attn.v_proj(h)))
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    mask = real[:, None, None]
    alpha = torch.softmax(scores.masked_fill(~mask, -math.inf), -1)
    alpha = torch.cat([tamper(alpha, mask)[:, :, :1], alpha[:, :, 1:]], 2)   # row 0 only
    x = last.norm1(h + attn.aggregator(alpha @ v))
    x = last.norm2(x + last.ffn(x))
    return torch.softmax(model.classify_logits(x), -1), leaf, alpha[:, :, 0], real


def test_bert_cls_row_tau_and_tvd_against_a_hand_written_last_layer(runs):
    task, dm, _ = load_task(runs["bert"])
    batch = dm.example_batch(4)
    result = jain_wallace(task, batch, permutations=P, seed=SEED)
    probs, leaf, cls, real = _bert_by_hand(task.model, batch, lambda w, m: w.detach())
    assert torch.allclose(probs, torch.softmax(task(batch), -1), atol=1e-5)  # the hand forward
    g = _importance(probs, leaf)
    row = cls.mean(1).detach()
    taus = [brute_tau(row[b][real[b]].numpy(), g[b][real[b]].numpy()) for b in range(4)]
    with torch.no_grad():
        base = _bert_by_hand(task.model, batch, lambda w, m: w)[0]
        permuting = _permuting(SEED)
        tvds = median_tvd(base, [_bert_by_hand(task.model, batch, permuting)[0] for _ in range(P)])
    check_result(result, taus, tvds, "⟨CLS⟩ attention row")


def _gat_by_hand(model, x, edge_index, tamper):
    """GAT (Veličković et al. 2018) with the output layer by hand (gat scorer, mean over heads),
    α (E, J) through ``tamper(α, target)``: (logits, α, sources, targets)."""
    h1 = F.elu(model.layers[0](x, edge_index))
    last = model.layers[-1]
    N, J = x.shape[0], last.heads
    keep = edge_index[0] != edge_index[1]
    loops = torch.arange(N).repeat(2, 1)
    src, dst = torch.cat([edge_index[:, keep], loops], 1)
    h = last.lin(h1).view(N, J, -1)
    u = torch.stack([s.u for s in last.scorers])
    v = torch.stack([s.v for s in last.scorers])
    scores = F.leaky_relu((h[src] * u).sum(-1) + (h[dst] * v).sum(-1), 0.2)       # (E, J)
    top = torch.full((N, J), -math.inf).scatter_reduce(0, dst[:, None].expand(-1, J), scores, "amax")
    e = (scores - top[dst]).exp()
    alpha = tamper(e / torch.zeros(N, J).index_add(0, dst, e)[dst], dst)
    out = torch.zeros(N, J, h.shape[-1]).index_add(0, dst, alpha.unsqueeze(-1) * h[src])
    return out.mean(1) + last.bias, alpha, src, dst


def test_gat_tau_and_tvd_within_each_nodes_incoming_edges(runs):
    task, dm, _ = load_task(runs["gat"])
    batch = dm.example_batch(4)
    result = jain_wallace(task, batch, permutations=P, seed=SEED)
    data, nodes = batch["graph"], batch["nodes"]
    x = data.x.float().requires_grad_()
    logits, alpha, src, dst = _gat_by_hand(task.model, x, data.edge_index, lambda w, d: w.detach())
    assert torch.allclose(logits, task.model(data.x, data.edge_index), atol=1e-5)
    probs = torch.softmax(logits[nodes], -1).max(-1).values
    taus = []
    for k, t in enumerate(nodes.tolist()):
        grad = torch.autograd.grad(probs[k], x, retain_graph=True)[0]
        g, into = (grad * x).sum(-1).abs().detach(), dst == t
        taus.append(brute_tau(alpha.mean(-1)[into].detach().numpy(), g[src[into]].numpy()))
    gen = torch.Generator().manual_seed(SEED)

    def probs_of(tamper):
        return torch.softmax(_gat_by_hand(task.model, x, data.edge_index, tamper)[0][nodes], -1)

    with torch.no_grad():
        base = probs_of(lambda w, d: w)
        permuted = [probs_of(lambda w, d: permute_segments(w, d, gen)) for _ in range(P)]
    check_result(result, taus, median_tvd(base, permuted), "incoming edges")
