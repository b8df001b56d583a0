"""bench/bert.py times attnflow's BERT against HF's BertForPreTraining: it must compare one function.

The weight mapping (``copy_to_hf``) and the configuration of the two models are checked here on a
small size: with attnflow's weights copied into HF's model and dropout off, hidden states, MLM and
NSP logits, the pretraining loss and every gradient agree; a wrong mapping is caught; the dropout
and GELU settings that the benchmark claims to match do match. Skipped where HF transformers is not
installed (CI: it is in the optional ``bench`` extra only).
"""

from __future__ import annotations

import math

import pytest
import torch

from support import load_bench

transformers = pytest.importorskip(
    "transformers", reason="HF transformers is not installed (pip install -e '.[interop]')")

SMALL = dict(d_model=32, layers=2, heads=4, ffn_dim=64, max_len=64)
VOCAB = 97


@pytest.fixture(scope="module")
def bench():
    return load_bench("bert")


@pytest.fixture(scope="module")
def batch(bench):
    b = bench.make_batch(VOCAB, batch=6, seq_len=24, short_seq_prob=0.5, seed=3)
    lengths = b["attention_mask"].sum(1)
    # the check must see padding (masked keys, zeroed rows) and selected positions
    assert lengths.min() < b["input_ids"].shape[1] and (b["mlm_labels"] != -100).sum() >= 6
    return b


def test_hf_with_copied_weights_computes_attnflows_function(bench, batch):
    diffs = bench.check_equivalence(VOCAB, batch, atol=1e-5, **SMALL)
    assert set(diffs) == {"hidden", "mlm_logits", "nsp_logits", "loss", "loss_hf_sel", "grad"}
    assert all(v <= 1e-5 for v in diffs.values()), diffs


def test_a_wrong_mapping_is_caught(bench, batch, monkeypatch):
    # keys and values swapped: every tensor is still copied, shapes agree, the function differs
    monkeypatch.setitem(bench.bert_hf.LAYER, "attention.self.key", "self_attn.v_proj")
    monkeypatch.setitem(bench.bert_hf.LAYER, "attention.self.value", "self_attn.k_proj")
    with pytest.raises(AssertionError, match="differ"):
        bench.check_equivalence(VOCAB, batch, atol=1e-5, **SMALL)


def test_copy_uses_every_tensor_and_both_have_the_same_parameters(bench):
    torch.manual_seed(0)
    ours, hf = bench.build_attnflow(VOCAB, **SMALL), bench.build_hf(VOCAB, **SMALL)
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731 (tied: counted once)
    assert count(ours) == count(hf)
    bench.copy_to_hf(ours, hf)
    assert torch.equal(hf.cls.predictions.decoder.weight, ours.token_embedding.weight)
    assert torch.equal(hf.cls.predictions.bias, ours.mlm_decoder.bias)
    del ours.positional  # a tensor HF needs that attnflow lacks: refused by name
    with pytest.raises(KeyError, match="positional.weight"):
        bench.copy_to_hf(ours, hf)


def test_dropout_and_gelu_as_the_benchmark_says(bench):
    ours = bench.build_attnflow(VOCAB, dropout=0.1, **SMALL)
    hf = bench.build_hf(VOCAB, dropout=0.1, **SMALL)
    cfg = hf.config
    assert cfg.hidden_dropout_prob == cfg.attention_probs_dropout_prob == 0.1
    assert cfg._attn_implementation == "sdpa" and cfg.layer_norm_eps == 1e-5
    layer = ours.encoder.layers[0]
    # embeddings and residual branches: model.dropout; α: attention.dropout; none after the GELU
    assert ours.encoder.dropout.p == layer.dropout.p == cfg.hidden_dropout_prob
    assert layer.self_attn.dropout == cfg.attention_probs_dropout_prob
    assert isinstance(layer.ffn.dropout, torch.nn.Identity)
    assert layer.norm1.eps == ours.embedding_norm.eps == cfg.layer_norm_eps
    # both GELUs are the exact x·Φ(x), Φ from erf (not the tanh approximation)
    x = torch.linspace(-4, 4, 101, dtype=torch.float64)
    exact = x * 0.5 * (1 + torch.erf(x / math.sqrt(2)))
    hf_act = hf.bert.encoder.layer[0].intermediate.intermediate_act_fn
    assert torch.allclose(hf_act(x), exact, atol=1e-12, rtol=0)
    assert torch.allclose(layer.ffn.activation(x), exact, atol=1e-12, rtol=0)


def test_attnflow_side_is_the_bert_mini_preset(bench):
    # what `attnflow-train model=bert_mini attention.dropout=0.1` builds, field for field
    from omegaconf import OmegaConf

    from attnflow.config.registry import MODELS
    from support import compose_cfg

    preset = OmegaConf.to_container(compose_cfg(["model=bert_mini", "attention.dropout=0.1"]).model,
                                    resolve=True)
    assert MODELS.validate(bench.attnflow_config(), "model") == MODELS.validate(preset, "model")
