"""Fine-tuning a pretrained `bert` (Devlin et al. 2019, §4): ``model.init_from`` loads the
embeddings, encoder and pooler of a pretraining checkpoint (the encoder's hidden states are
reproduced exactly), the classification head is new, every mismatch is refused naming what
differs, and ``freeze_encoder`` leaves the encoder without gradients."""

from __future__ import annotations

import copy
import functools
import logging

import pytest
import torch
import torch.nn.functional as F

from attnflow.config.registry import MODELS, ConfigError
from attnflow.tasks.bert_pretraining import BertPretrainingTask
from support import compose_cfg

V, C = 50, 3
PRETRAINING_HEADS = {"mlm_transform", "mlm_norm", "mlm_decoder", "nsp"}
TINY = ["model.d_model=32", "model.ffn_dim=64", "model.layers=2", "model.max_len=16",
        "attention.heads=2"]


@functools.lru_cache(maxsize=None)
def _config(overrides):
    return MODELS.validate(compose_cfg(["model=bert_mini", *TINY, *overrides]).model)


def config(*overrides):
    return copy.deepcopy(_config(overrides))  # Hydra's compose is the slow part: once per set


def build(*overrides, vocab=V, classes=C):
    return MODELS.build(config(*overrides), vocab_size=vocab, pad_id=0, num_classes=classes)


def batch():
    ids = torch.tensor([[2, 10, 11, 12, 3, 20, 21, 22, 3],
                        [2, 13, 14, 3, 23, 3, 0, 0, 0],
                        [2, 15, 3, 24, 3, 0, 0, 0, 0]])
    return ids, (torch.arange(9) >= 4).long().expand(3, 9) * (ids != 0), ids != 0


def pretraining_run(tmp_path, *overrides, vocab=V, name="run"):
    """A pretraining model (non-trivial biases and LayerNorms, so every tensor matters) saved as
    attnflow-train saves it: the task's state_dict ('model.' prefix) and the resolved config."""
    torch.manual_seed(1)
    model = build(*overrides, vocab=vocab, classes=0)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if n.endswith("bias") or "norm" in n:
                p.add_(torch.randn_like(p) * 0.1)
    task = BertPretrainingTask(model, 4, [str(i) for i in range(vocab)])
    ckpt = {"state_dict": task.state_dict(),
            "attnflow_config": {"data": {"name": "bert_pretraining"},
                                "model": config(*overrides), "task": {"name": "bert_pretraining"}}}
    (tmp_path / name / "checkpoints").mkdir(parents=True)
    torch.save(ckpt, tmp_path / name / "checkpoints" / "last.ckpt")
    return model.eval(), tmp_path / name


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
    """The default pretraining run (read only), made once for the module."""
    return pretraining_run(tmp_path_factory.mktemp("pretrained"))


@pytest.mark.parametrize("head", ["sequence", "token"])
def test_loading_reproduces_the_pretrained_hidden_states_exactly(pretrained, head, caplog):
    pre, run_dir = pretrained
    ids, seg, mask = batch()
    want = pre(ids, seg, mask)
    torch.manual_seed(2)
    fresh = build(f"model.head={head}").eval()
    assert not torch.allclose(fresh(ids, seg, mask), want, atol=1e-3)  # not so by chance
    with caplog.at_level(logging.INFO, logger="attnflow.models.bert"):
        torch.manual_seed(2)
        tuned = build(f"model.head={head}", f"model.init_from={run_dir}").eval()
    assert torch.equal(tuned(ids, seg, mask), want)
    assert torch.equal(tuned.pooled(want), pre.pooled(want))
    # the report: every encoder-side tensor of the checkpoint loaded, the head new, MLM/NSP unused
    encoder_side = [k for k in pre.state_dict() if k.split(".")[0] not in PRETRAINING_HEADS]
    lines = [r.getMessage() for r in caplog.records if "loaded" in r.getMessage()]
    assert len(lines) == 1, lines
    assert f"loaded {len(encoder_side)} tensors from {run_dir / 'checkpoints' / 'last.ckpt'}" in lines[0]
    assert "new: classifier.weight, classifier.bias;" in lines[0]
    unused = lines[0].split("unused: ")[1].split(", ")
    assert unused == sorted(k for k in pre.state_dict() if k.split(".")[0] in PRETRAINING_HEADS
                            and k != "mlm_decoder.weight")  # that one is the loaded embedding


def test_a_checkpoint_file_works_like_its_run_directory(pretrained):
    pre, run_dir = pretrained
    tuned = build("model.head=sequence",
                  f"model.init_from={run_dir / 'checkpoints' / 'last.ckpt'}").eval()
    ids, seg, mask = batch()
    assert torch.equal(tuned(ids, seg, mask), pre(ids, seg, mask))


def test_the_new_head_is_fresh_and_classifies_the_pooled_cls(pretrained):
    pre, run_dir = pretrained
    torch.manual_seed(3)
    model = build("model.head=sequence", f"model.init_from={run_dir}").eval()
    W, b = model.classifier.weight, model.classifier.bias
    assert W.shape == (C, 32) and torch.equal(b, torch.zeros(C))
    assert 0.01 < W.std().item() < 0.03  # N(0, 0.02²), as BERT initialises new layers
    assert not any(v.shape == W.shape and torch.equal(v, W) for v in pre.state_dict().values())
    assert not hasattr(model, "nsp") and not hasattr(model, "mlm_decoder")
    torch.nn.init.normal_(b)
    ids, seg, mask = batch()
    hidden = model(ids, seg, mask)
    z0 = hidden[:, 0]  # ⟨CLS⟩; eval: dropout is the identity
    want = torch.tanh(z0 @ pre.pooler.weight.T + pre.pooler.bias) @ W.T + b
    assert torch.allclose(model.classify_logits(hidden), want, atol=1e-6)


def test_dropouts_may_differ_from_the_pretraining_run(pretrained):
    pre, run_dir = pretrained
    model = build("model.head=sequence", "model.dropout=0.3", "model.classifier_dropout=0.2",
                  f"model.init_from={run_dir}")
    assert torch.equal(model.token_embedding.weight, pre.token_embedding.weight)


@pytest.mark.parametrize("overrides, named", [
    (["model.d_model=48"], ["model.d_model: checkpoint 32, this run 48"]),
    (["model.layers=3", "model.ffn_dim=96"],
     ["model.ffn_dim: checkpoint 64, this run 96", "model.layers: checkpoint 2, this run 3"]),
    (["attention.heads=4"], ["model.attention.heads: checkpoint 2, this run 4"]),
    (["model.norm=pre"], ["model.norm: checkpoint post, this run pre"]),
    (["model.activation=relu"], ["model.activation: checkpoint gelu, this run relu"]),
    (["model.type_vocab_size=3"], ["model.type_vocab_size: checkpoint 2, this run 3"]),
    (["positional.max_len=32"], ["model.positional.max_len: checkpoint 512, this run 32"]),
    (["positional=sinusoidal"], ["model.positional.name: checkpoint learned, this run sinusoidal"]),
    (["scorer=dot"], ["model.attention.scorer.name: checkpoint scaled_dot, this run dot"]),
])
def test_an_architecture_mismatch_names_each_differing_field(pretrained, overrides, named):
    _, run_dir = pretrained
    with pytest.raises(ConfigError) as err:
        build("model.head=sequence", *overrides, f"model.init_from={run_dir}")
    message = str(err.value)
    assert message.startswith("model.init_from:")
    for part in named:
        assert part in message, message
    assert message.count(", this run ") == len(named), message  # nothing else differs
    assert "model.dropout" not in message and "init_std" not in message


def test_a_vocabulary_mismatch_asks_for_the_pretraining_tokenizer(tmp_path):
    _, run_dir = pretraining_run(tmp_path, vocab=60)
    with pytest.raises(ConfigError, match=r"60 tokens but this run's tokenizer gives 50: the "
                                          r"tokenizer must be the checkpoint's"):
        build("model.head=sequence", f"model.init_from={run_dir}", vocab=50)


def test_another_model_family_is_named(tmp_path):
    run_dir = tmp_path / "mt"
    (run_dir / "checkpoints").mkdir(parents=True)
    torch.save({"state_dict": {"model.encoder.embedding.weight": torch.zeros(5, 4)},
                "attnflow_config": {"data": {"name": "multi30k"}, "model": {"name": "transformer"},
                                    "task": {"name": "translation"}}},
               run_dir / "checkpoints" / "last.ckpt")
    with pytest.raises(ConfigError, match=r"model 'transformer', not of a "
                                          r"'bert' run"):
        build("model.head=sequence", f"model.init_from={run_dir}")


class Payload:
    """An arbitrary object: unpickling it would run the program's code."""


def test_unreadable_or_unsafe_checkpoints_are_refused(tmp_path):
    with pytest.raises(ConfigError, match="model.init_from: no such run directory"):
        build("model.head=sequence", f"model.init_from={tmp_path / 'nowhere'}")
    bad = tmp_path / "pickled.ckpt"
    torch.save({"state_dict": {}, "attnflow_config": {"data": {"name": "x"}, "model": {"name": "bert"}},
                "object": Payload()}, bad)
    with pytest.raises(ConfigError, match="weights_only"):  # never unpickled
        build("model.head=sequence", f"model.init_from={bad}")


def test_freeze_encoder_leaves_only_the_head_trainable(pretrained):
    pre, run_dir = pretrained
    model = build("model.head=sequence", "model.freeze_encoder=true", f"model.init_from={run_dir}")
    ids, seg, mask = batch()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    opt = torch.optim.AdamW(model.parameters(), lr=0.1, weight_decay=0.01)
    loss = F.cross_entropy(model.train().classify_logits(model(ids, seg, mask)), torch.tensor([0, 1, 2]))
    loss.backward()
    opt.step()
    for n, p in model.named_parameters():
        if n.startswith("classifier."):
            assert p.requires_grad and p.grad.abs().sum() > 0 and not torch.equal(p, before[n])
        else:  # embeddings, positions, encoder, pooler
            assert not p.requires_grad and p.grad is None and torch.equal(p, before[n]), n
    assert {n.split(".")[0] for n, p in model.named_parameters() if not p.requires_grad} == {
        "token_embedding", "segment_embedding", "positional", "embedding_norm", "encoder", "pooler"}


def test_without_freeze_the_encoder_trains(pretrained):
    _, run_dir = pretrained
    model = build("model.head=sequence", f"model.init_from={run_dir}")
    ids, seg, mask = batch()
    F.cross_entropy(model.classify_logits(model(ids, seg, mask)), torch.tensor([0, 1, 2])).backward()
    assert all(p.grad is not None for p in model.encoder.parameters())


def test_a_fine_tuned_run_gives_its_encoder_but_never_its_classifier(pretrained, tmp_path):
    pre, run_dir = pretrained
    first = build("model.head=sequence", f"model.init_from={run_dir}")
    with torch.no_grad():
        first.classifier.weight.add_(1.0)
        first.encoder.layers[0].ffn.linear1.bias.add_(1.0)  # "fine-tuned"
    task = BertPretrainingTask(first, 4, [str(i) for i in range(V)])  # the same 'model.' prefix
    (tmp_path / "ft" / "checkpoints").mkdir(parents=True)
    torch.save({"state_dict": task.state_dict(), "attnflow_config": {
        "data": {"name": "text_classification"}, "model": config("model.head=sequence"),
        "task": {"name": "text_classification"}}}, tmp_path / "ft" / "checkpoints" / "last.ckpt")
    second = build("model.head=sequence", f"model.init_from={tmp_path / 'ft'}")
    assert torch.equal(second.encoder.layers[0].ffn.linear1.bias, first.encoder.layers[0].ffn.linear1.bias)
    assert not torch.equal(second.classifier.weight, first.classifier.weight)
    assert torch.equal(second.classifier.bias, torch.zeros(C))


def test_pretraining_can_go_on_from_a_pretraining_run(pretrained):
    pre, run_dir = pretrained
    more = build(f"model.init_from={run_dir}", classes=0).eval()  # head: pretraining
    ids, seg, mask = batch()
    hidden = pre(ids, seg, mask)
    assert torch.equal(more.mlm_logits(hidden), pre.mlm_logits(hidden))
    assert torch.equal(more.nsp_logits(hidden), pre.nsp_logits(hidden))
    assert more.mlm_decoder.weight is more.token_embedding.weight  # still tied
