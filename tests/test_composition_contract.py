"""The composition contract: every shared group is used or refused, decisions by capability, one
source of defaults, and a new block works everywhere with no edit outside its own file."""

from __future__ import annotations

import re

import pytest
import torch
import yaml
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf
from torch import nn

from attnflow.blocks.scorers.base import Scorer
from attnflow.config.groups import consumed_groups, drop_swapped_block_fields, field_overrides
from attnflow.config.registry import MODELS, Registry, SCORERS, ConfigError
from attnflow.training.validate import resolve_config
from attnflow.training.run import train
from support import CONF, FAST, compose_cfg, readme_block_example

# -- a scorer written here, in the test, and nowhere else ------------------------------------------
SCRATCH = "scratch_bilinear_test"


class ScratchScorer(Scorer):
    """a(k, q) = γ qᵀWk with its own parameters (so per-head copies differ)."""

    def __init__(self, query_dim: int, key_dim: int, *, gain: float = 1.0):
        super().__init__(query_dim, key_dim)
        self.gain = gain
        self.W = nn.Parameter(torch.randn(query_dim, key_dim) * 0.3)

    def score_prepared(self, query, keys):
        return self.gain * (query @ self.W) @ keys.transpose(-1, -2)


SCRATCH_CFG = {"name": SCRATCH, "gain": 0.5}


@pytest.fixture
def scratch_scorer():
    SCORERS.register(SCRATCH)(ScratchScorer)
    yield
    SCORERS.unregister(SCRATCH)


def _backward_reaches_the_scorer(model, out):
    out.float().pow(2).mean().backward()
    grads = [m.W.grad for m in model.modules() if isinstance(m, ScratchScorer)]
    assert grads and all(g is not None and g.abs().sum() > 0 for g in grads)


def test_a_new_scorer_works_in_luong_transformer_han_and_gat_with_no_other_change(scratch_scorer):
    torch.manual_seed(0)
    src = torch.randint(3, 12, (2, 5))
    lengths = torch.tensor([5, 3])
    tgt = torch.randint(3, 12, (2, 4))
    # Luong (global attention over the encoder states, a plain block: the scorer sees raw states)
    luong = MODELS.build({"name": "seq2seq", "embed_dim": 8,
                          "encoder": {"name": "rnn", "hidden_dim": 4},
                          "decoder": {"name": "luong", "embed_dim": 8, "hidden_dim": 6,
                                      "attention": {"name": "single", "scorer": SCRATCH_CFG}}},
                         src_vocab=12, tgt_vocab=12)
    logits, _ = luong(src, lengths, tgt)
    _backward_reaches_the_scorer(luong, logits)
    # Transformer: every head of self- and encoder–decoder attention, teacher forcing and
    # incremental decoding (the cached keys are prepared by the new scorer each step)
    transformer = MODELS.build({"name": "transformer", "d_model": 8, "ffn_dim": 16,
                                "encoder_layers": 1, "decoder_layers": 1,
                                "attention": {"name": "multihead", "heads": 2, "scorer": SCRATCH_CFG}},
                               src_vocab=12, tgt_vocab=12)
    logits, _ = transformer(src, lengths, tgt)
    _backward_reaches_the_scorer(transformer, logits)
    transformer.eval()
    tokens, _ = transformer.greedy(src, lengths, bos_id=1, eos_id=2, max_len=4)
    tgt_in = torch.cat([torch.ones(2, 1, dtype=torch.long), tokens[:, :-1]], 1)
    forced, _ = transformer(src, lengths, tgt_in)
    assert torch.equal(tokens[:, 0], forced[:, 0].argmax(-1))
    # HAN: both attention poolings
    han = MODELS.build({"name": "han", "embed_dim": 8,
                        "word_encoder": {"name": "rnn", "hidden_dim": 4},
                        "sentence_encoder": {"name": "rnn", "hidden_dim": 4},
                        "word_pooling": {"name": "attention", "dim": 6, "scorer": SCRATCH_CFG},
                        "sentence_pooling": {"name": "attention", "dim": 6, "scorer": SCRATCH_CFG}},
                       vocab_size=12, num_classes=2)
    out = han(torch.randint(1, 12, (2, 3, 4)), torch.tensor([[4, 2, 0], [3, 0, 0]]))
    assert torch.allclose(out["word_weights"][0, 0].sum(), torch.tensor(1.0))
    _backward_reaches_the_scorer(han, out["logits"])
    # GAT: one scorer per head, scored per edge
    gat = MODELS.build({"name": "gat", "hidden_dim": 3, "heads": 2, "scorer": SCRATCH_CFG},
                       in_dim=5, num_classes=3)
    edge_index = torch.tensor([[0, 1, 2, 3, 1], [1, 2, 3, 0, 0]])
    logits, weights = gat(torch.randn(4, 5), edge_index, need_weights=True)
    edges, alpha = weights[0]
    sums = torch.zeros(4, 2).index_add_(0, edges[1], alpha)
    assert torch.allclose(sums, torch.ones(4, 2), atol=1e-5)
    _backward_reaches_the_scorer(gat, logits)


# one training step on a few sequences, nothing recorded that the tests do not read
ONE_STEP = [*FAST, "data.train_size=32", "data.val_size=16", "data.test_size=16",
            "trainer.fast_dev_run=true", "logger=none", "trainer.enable_model_summary=false",
            "callbacks.attention_maps.examples=0"]


@pytest.mark.slow
@pytest.mark.parametrize("experiment", [[], ["experiment=reverse_transformer"]])
def test_the_readme_block_example_works_verbatim(experiment, tmp_path):
    """The README's scorer trains a step; the saved config holds only the groups that were used
    (the default experiment's RNN decoder: no aggregator, positional or pooling)."""
    code, overrides, name = readme_block_example()
    exec(compile(code, "README.md", "exec"), {})
    try:
        summary = train(compose_cfg([*experiment, *overrides, *ONE_STEP]), tmp_path)
    finally:
        SCORERS.unregister(name)
    assert summary["global_step"] == 1
    saved = OmegaConf.load(tmp_path / "config.yaml")
    assert saved.scorer.name == name and saved.scorer.gain == 2
    if not experiment:
        assert {"scorer", "normalizer", "attention"} <= set(saved)
        assert not {"aggregator", "positional", "pooling"} & set(saved)


def _model(overrides, **context):
    cfg = resolve_config(compose_cfg(overrides))
    return cfg, MODELS.build(cfg["model"], **context)


def _kinds(model, attribute):
    return {type(getattr(m, attribute)).registry_name for m in model.modules() if hasattr(m, attribute)
            and isinstance(getattr(m, attribute), nn.Module)}


@pytest.mark.parametrize("overrides, attribute, expected", [
    (["experiment=reverse_transformer", "normalizer=norm"], "normalizer", {"norm"}),
    (["experiment=reverse_multihead", "aggregator=mean"], "aggregator", {"mean"}),  # an RNN decoder reads its size
    (["experiment=reverse_transformer", "scorer=general"], "scorer", {"general"}),
    (["model=transformer", "attention=single"], "self_attn", {"single"}),
    (["model=transformer", "attention=relative_multihead"], "self_attn", {"relative_multihead"}),
    (["experiment=han_imdb", "normalizer=norm"], "normalizer", {"norm"}),
])
def test_overrides_that_were_silent_now_take_effect(overrides, attribute, expected):
    context = dict(vocab_size=20, num_classes=2) if "han" in str(overrides) else dict(src_vocab=20, tgt_vocab=20)
    _, model = _model(overrides, **context)
    assert _kinds(model, attribute) == expected


def test_gat_uses_the_registry_normalizer():
    _, model = _model(["experiment=gat_cora", "normalizer=norm"], in_dim=5, num_classes=3)
    assert _kinds(model, "normalizer") == {"norm"}


@pytest.mark.parametrize("overrides, expected", [
    (["aggregator=mean"], "aggregator=mean (at 'aggregator') does nothing: model 'seq2seq'"),
    (["positional=relative"], "model 'seq2seq' does not use the shared group 'positional'"),
    (["pooling.name=attentoin"], "pooling=attentoin (at 'pooling') does nothing"),
    (["experiment=han_imdb", "pooling.name=attentoin"], "unknown pooling 'attentoin'"),
    (["experiment=self_attentive_imdb", "scorer=dot"], "model 'self_attentive' does not use"),
    (["experiment=gat_cora", "attention=multihead"], "model 'gat' does not use the shared group 'attention'"),
    (["experiment=gat_cora", "aggregator=mean"], "model 'gat' does not use the shared group 'aggregator'"),
    (["experiment=mt_rnnenc", "scorer.hidden_dim=64"], "scorer.hidden_dim=64 (at 'scorer') does nothing"),
])
@pytest.mark.slow
def test_overrides_of_unused_groups_are_refused_before_any_work(overrides, expected):
    with pytest.raises(ConfigError) as err:
        resolve_config(compose_cfg(overrides))
    assert expected in str(err.value)
    if "does not use" in expected or "does nothing" in expected:
        assert "it uses:" in str(err.value)


@pytest.mark.slow
@pytest.mark.parametrize("pooling", ["max", "mean"])
def test_a_group_only_the_experiment_set_is_left_out_when_an_override_makes_it_unused(pooling):
    """The README's HN-MAX/HN-AVE commands: han_imdb sets scorer=dot for its attention pooling,
    which max and mean pooling do not use. Composed as the command line does (Hydra's node says
    what was typed), only a group the user typed is refused."""
    resolved = resolve_config(compose_cfg(["experiment=han_imdb", f"pooling={pooling}"], return_hydra_config=True))
    assert resolved["pooling"]["name"] == pooling and "scorer" not in resolved
    with pytest.raises(ConfigError, match=r"scorer=general \(at 'scorer'\) does nothing: model 'han'"):
        resolve_config(compose_cfg(["experiment=han_imdb", f"pooling={pooling}", "scorer=general"],
                                   return_hydra_config=True))
    # the message names the override as typed, not the experiment's scorer=dot it changed
    for typed in ("scorer.name=general", "scorer.hidden_dim=3"):
        with pytest.raises(ConfigError) as err:
            resolve_config(compose_cfg(["experiment=han_imdb", f"pooling={pooling}", typed],
                                       return_hydra_config=True))
        assert str(err.value).startswith(f"{typed} (at 'scorer') does nothing: model 'han'"), err.value


@pytest.mark.slow
def test_consumption_follows_interpolations():
    assert consumed_groups(compose_cfg()) == ["scorer", "normalizer", "attention"]
    assert consumed_groups(compose_cfg(["attention=multihead"])) == [
        "scorer", "normalizer", "aggregator", "attention"]
    assert consumed_groups(compose_cfg(["experiment=han_imdb"])) == ["scorer", "normalizer", "pooling"]
    assert consumed_groups(compose_cfg(["experiment=mt_rnnenc"])) == []
    # composing by groups without an experiment: the default positional group is simply unused
    assert resolve_config(compose_cfg(["model=rnnsearch_mt"]))["model"]["name"] == "seq2seq"


def test_replacing_a_block_by_name_drops_the_old_blocks_fields():
    cfg = OmegaConf.create({"scorer": {"name": "dot", "hidden_dim": 7}})
    with pytest.warns(UserWarning, match=r"scorer 'dot' has no field scorer.hidden_dim: set for "
                                         r"the scorer that scorer.name=dot replaced, left out"):
        drop_swapped_block_fields(cfg, ["scorer.name=dot"])
    assert OmegaConf.to_container(cfg.scorer) == {"name": "dot"}
    typed = OmegaConf.create({"scorer": {"name": "dot", "hidden_dim": 8}})  # typed: kept
    drop_swapped_block_fields(typed, ["scorer.name=dot", "scorer.hidden_dim=8"])
    assert typed.scorer.hidden_dim == 8


@pytest.mark.slow
def test_a_group_option_chosen_over_an_experiments_drops_the_fields_it_lacks():
    """reverse_multihead sets attention.heads and head_dim; attention=single (no heads) leaves
    them out with a warning. A field typed for a block without it is refused, and so is the
    experiment's own block where no command line is known."""
    cmd = ["experiment=reverse_multihead", "attention=single"]
    with pytest.warns(UserWarning, match=r"attention 'single' has no field attention.heads, "
                                         r"attention.head_dim: set for the attention that "
                                         r"attention=single replaced, left out"):
        resolved = resolve_config(compose_cfg(cmd, return_hydra_config=True))
    assert resolved["attention"]["name"] == "single" and "heads" not in resolved["attention"]
    assert resolved["model"]["decoder"]["attention"] == resolved["attention"]
    MODELS.build(resolved["model"], src_vocab=12, tgt_vocab=12, pad_id=0, path="model")
    with pytest.warns(UserWarning, match=r"attention.heads, attention.head_dim"):  # chosen by name
        by_name = resolve_config(compose_cfg(["experiment=reverse_multihead", "attention.name=single"],
                                             return_hydra_config=True))
    assert by_name["attention"] == resolved["attention"]
    with pytest.raises(ConfigError, match=r"attention 'single' has no field 'heads' \(at 'attention.heads'\)"):
        resolve_config(compose_cfg([*cmd, "attention.heads=8"], return_hydra_config=True))
    with pytest.raises(ConfigError, match=r"has no field 'heads'"):  # no command line known: as typed
        resolve_config(compose_cfg(cmd))


@pytest.mark.parametrize("base, extra, left_out", [
    ([], [], "model.encoder.hidden_dim"),                               # rnnsearch's rnn encoder
    (["experiment=self_attentive_imdb"], ["model.encoder.d_model=64"],  # (8 heads do not divide 100)
     "model.encoder.cell, model.encoder.hidden_dim"),
])
@pytest.mark.slow
def test_a_nested_block_swapped_by_name_drops_the_fields_set_for_the_old_one(base, extra, left_out):
    """model.encoder.name=transformer_encoder was refused for the rnn encoder's fields that the
    model file set (encoder 'transformer_encoder' has no field 'hidden_dim'), fields the user never
    typed, so an encoder could be swapped only with ~deletions, and never in a sweep. Now those
    fields are left out with a warning and the new encoder gets its own defaults; a field the user
    types for the new block is still refused, and without the swap the model file's fields stay."""
    from attnflow.config.registry import ENCODERS

    swap = [*base, "model.encoder.name=transformer_encoder", *extra]
    with pytest.warns(UserWarning, match=rf"encoder 'transformer_encoder' has no field {left_out}: set "
                                         rf"for the encoder that model.encoder.name=transformer_encoder "
                                         rf"replaced, left out"):
        resolved = resolve_config(compose_cfg(swap, return_hydra_config=True))
    encoder = resolved["model"]["encoder"]
    defaults = {f: d for f, _, d in ENCODERS.fields("transformer_encoder") if "." not in f}
    assert encoder["name"] == "transformer_encoder" and set(encoder) == {"name", *defaults}
    assert encoder["d_model"] == (64 if extra else defaults["d_model"])
    built = MODELS.validate(resolved["model"], "model")["encoder"]  # the block's own defaults
    plain = {k for k, v in defaults.items() if not isinstance(v, dict) and k != "d_model"}
    assert {k: built[k] for k in plain} == {k: defaults[k] for k in plain} and len(plain) >= 5
    with pytest.raises(ConfigError, match=r"encoder 'transformer_encoder' has no field 'hidden_dim' "
                                          r"\(at 'model.encoder.hidden_dim'\)"):
        resolve_config(compose_cfg([*swap, "model.encoder.hidden_dim=8"], return_hydra_config=True))
    kept = resolve_config(compose_cfg(base, return_hydra_config=True))["model"]["encoder"]
    assert kept["name"] != "transformer_encoder" and "hidden_dim" in kept


@pytest.mark.slow
def test_a_field_typed_under_a_block_left_at_its_default_tunes_that_block():
    """transformer_encoder's ``attention`` is absent from the config files (its constructor default,
    multihead of 8 scaled-dot heads): a field typed under it, two levels down too, is set on that
    block, which the run's config names. Where the files name the block through a shared group
    (rnnsearch's decoder: ``${attention}``), the nameless typed block is refused."""
    from attnflow.models.encoder_decoder import EncoderDecoder  # noqa: F401 (registered models)
    from attnflow.config.registry import ATTENTIONS, ENCODERS

    swap = ["model=rnnsearch", "model.encoder.name=transformer_encoder", "model.encoder.d_model=32"]
    def build(*extra):  # with Hydra's node, as attnflow-train composes it (the typed overrides)
        cfg = resolve_config(compose_cfg([*swap, *extra], return_hydra_config=True))
        return cfg, MODELS.build(cfg["model"], src_vocab=20, tgt_vocab=20)

    with pytest.warns(UserWarning, match="model.encoder.hidden_dim: set for the encoder"):
        cfg, model = build("model.encoder.attention.heads=2", "model.encoder.attention.scorer.name=dot")
    attention = cfg["model"]["encoder"]["attention"]
    assert (attention["name"], attention["heads"], attention["scorer"]["name"]) == ("multihead", 2, "dot")
    default = ENCODERS.child_default("transformer_encoder", "attention")
    assert default == {"name": "multihead"}  # the block the fields were set on
    layers = [m for m in model.encoder.modules() if type(m).__name__ == "MultiHeadAttention"]
    assert layers and {m.heads for m in layers} == {2} and \
        {m.head_dim for m in layers} == {32 // 2}  # d_model 32 split over the 2 typed heads
    assert {type(m.scorer).registry_name for m in layers} == {"dot"}
    plain = ATTENTIONS.validate(default, "a")  # untouched fields keep the block's defaults
    assert {m.dropout for m in layers} == {plain["dropout"]}
    # without the typed fields: the constructor default, as before
    with pytest.warns(UserWarning, match="left out"):
        _, untouched = build()
    heads = {m.heads for m in untouched.encoder.modules() if type(m).__name__ == "MultiHeadAttention"}
    assert heads == {plain["heads"]} and plain["heads"] != 2
    with pytest.raises(ConfigError, match=r"'model.decoder.attention' needs a 'name'.*"
                                          r"\(it holds only dropout\)"):
        with pytest.warns(UserWarning, match="left out"):
            build("model.decoder.attention.dropout=0.1")


def test_a_block_swapped_by_name_over_a_shared_group_takes_effect():
    """reverse_bahdanau takes the decoder's attention from the shared group (single, additive);
    model.decoder.attention.name=multihead replaces it by multihead with its own defaults."""
    swap = ["experiment=reverse_bahdanau", "model.decoder.attention.name=multihead"]
    cfg = resolve_config(compose_cfg(swap, return_hydra_config=True))
    model = MODELS.build(cfg["model"], src_vocab=20, tgt_vocab=20)
    assert _kinds(model.decoder, "scorer") == {"scaled_dot"}
    base = MODELS.build(resolve_config(compose_cfg(swap[:1], return_hydra_config=True))["model"],
                        src_vocab=20, tgt_vocab=20)
    assert _kinds(base.decoder, "scorer") == {"additive"}


@pytest.mark.slow
def test_plain_field_overrides_reach_fields_left_at_their_defaults():
    assert field_overrides(["scorer=dot", "attention.heads=2", "+x=1", "~y", "hydra.run.dir=d",
                            "experiment=mt_rnnenc", "seed=3"], CONF) == [
        "scorer=dot", "++attention.heads=2", "+x=1", "~y", "hydra.run.dir=d", "experiment=mt_rnnenc",
        "seed=3"]
    cfg = resolve_config(compose_cfg(["attention=multihead", "attention.heads=2"]))
    assert cfg["model"]["decoder"]["attention"]["heads"] == 2
    with pytest.raises(ConfigError, match="no block has a field 'haeds'.*Did you mean 'heads'"):
        compose_cfg(["attention=multihead", "attention.haeds=2"])
    with pytest.raises(ConfigError, match="attention 'single' has no field 'heads'"):
        resolve_config(compose_cfg(["attention.heads=2"]))  # a field of another block
    with pytest.raises(ConfigCompositionException):  # a key no config has: Hydra's strict check
        compose_cfg(["sed=3"])
    assert resolve_config(compose_cfg(["seed=3"]))["seed"] == 3


# -- one source of defaults -------------------------------------------------------------------------
GROUP_KINDS = ("scorer", "normalizer", "aggregator", "attention", "positional", "pooling", "model",
               "task", "data", "logger")


def _repeated_defaults(kind, node, path):
    registry = Registry.kinds()[kind]
    name = node.get("name")
    if name not in registry:
        return []
    fields = {f: default for f, _, default in registry.fields(name)}
    children = registry._specs[name].children
    found = []
    for key, value in node.items():
        if key in ("name", "defaults") or key not in fields or (isinstance(value, str) and "${" in value):
            continue
        if value == fields[key] and not (isinstance(value, dict) and set(value) == {"name"}):
            # (a child spec that only names its default block stays: it makes the block's fields
            # overridable, e.g. model.encoder.channels=[8,16], which would otherwise lack a name)
            found.append(f"{path}.{key}: {value!r}")
        elif key in children and isinstance(value, dict) and "name" in value:
            found += _repeated_defaults(children[key], value, f"{path}.{key}")
    return found


def _interpolated_keys():
    """'model.layers' for every ${model.layers} in conf/: Hydra can only interpolate a value that
    is in the composed config, so a default another file refers to stays in its YAML."""
    text = "\n".join(p.read_text() for p in CONF.rglob("*.yaml"))
    return set(re.findall(r"\$\{([a-z_]+\.[\w.]+)\}", text))


def test_no_group_file_repeats_a_constructor_default():
    referenced = _interpolated_keys()
    found = []
    for kind in GROUP_KINDS:
        for path in sorted((CONF / kind).glob("*.yaml")):
            node = yaml.safe_load(path.read_text()) or {}
            if "name" in node:
                found += [f"{path.relative_to(CONF)}: {f}" for f in _repeated_defaults(kind, node, kind)
                          if f.split(":")[0] not in referenced]
    assert not found, "YAML repeats constructor defaults (delete these lines):\n" + "\n".join(found)


def test_every_group_file_names_a_registered_block():
    for kind in GROUP_KINDS:
        for path in (CONF / kind).glob("*.yaml"):
            node = yaml.safe_load(path.read_text()) or {}
            if "name" in node:
                assert node["name"] in Registry.kinds()[kind], path


@pytest.mark.parametrize("overrides, field", [
    (["~model.encoder", "+model.encoder={name: cnn}"], "model.encoder"),  # seq2seq, the default
    (["experiment=han_imdb", "~model.word_encoder", "+model.word_encoder={name: features}"],
     "model.word_encoder"),
])
def test_an_image_encoder_in_a_sequence_model_is_refused_before_any_work(overrides, field, tmp_path):
    """Image encoders take images, not (x, lengths): a text model with one failed only at its first
    batch; now refused naming the field and the sequence encoders."""
    from attnflow.training.run import train

    with pytest.raises(ConfigError) as err:
        train(compose_cfg(overrides), tmp_path)
    message = str(err.value)
    assert message.startswith(f"{field}: encoder ") and "token sequences" in message
    assert "rnn" in message and "cnn" not in message.split("sequences:")[1]
    assert not (tmp_path / "checkpoints").exists()


@pytest.mark.parametrize("overrides, says", [
    (["model.dropout=1.5"], "model 'seq2seq': field 'dropout' (at 'model.dropout') must be in [0, 1), got 1.5"),
    (["task.optim.lr=-1"], "field 'lr' (at 'task.optim.lr') must be > 0, got -1.0"),
    (["task.optim.lr=inf"], "field 'lr' (at 'task.optim.lr') must be a finite number > 0, got inf"),
    (["task.penalty_weight=inf"], "(at 'task.penalty_weight') must be a finite number >= 0, got inf"),
    (["task.optim.warmup_steps=-4"], "(at 'task.optim.warmup_steps') must be >= 0, got -4"),
    (["experiment=reverse_transformer", "task.label_smoothing=2"], "(at 'task.label_smoothing') must be in [0, 1)"),
    (["data.batch_size=0"], "data 'reverse': field 'batch_size' (at 'data.batch_size') must be >= 1, got 0"),
    (["experiment=gat_cora", "model.attn_dropout=1"], "(at 'model.attn_dropout') must be in [0, 1), got 1.0"),
    (["experiment=mt_transformer", "task.beam_size=0"], "(at 'task.beam_size') must be >= 1, got 0"),
    (["experiment=mt_transformer", "task.length_penalty=-0.6"], "(at 'task.length_penalty') must be >= 0"),
    (["experiment=han_imdb", "model.word_encoder.hidden_dim=0"],
     "field 'hidden_dim' (at 'model.word_encoder.hidden_dim') must be >= 1, got 0"),
    # data and pooling fields whose bounds came only in the constructor (after config.yaml; a
    # tokenizer trained first) or nowhere (a negative vocabulary: an OverflowError in the trainer)
    (["experiment=mt_transformer", "data.vocab_size=-1"], "data 'parallel': field 'vocab_size' "
                                                          "(at 'data.vocab_size') must be >= 5"),
    (["experiment=bert_imdb", "data.max_len=2"], "(at 'data.max_len') must be >= 3 ([CLS], a subword, [SEP])"),
    (["experiment=bert_pretrain_imdb", "data.vocab_size=5"], "(at 'data.vocab_size') must be >= 6"),
    (["experiment=gat_synthetic", "data.p_in=2.5"], "(at 'data.p_in') must be in [0, 1], got 2.5"),
    (["experiment=han_imdb", "pooling.dim=0"], "pooling 'attention': field 'dim' (at 'pooling.dim') must be >= 1"),
    # fields that must agree with another, checked by the block's check_config before any work
    (["experiment=bert_imdb", "positional.max_len=64"], "model.max_len=512 is longer than the 64 learned positions"),
    (["experiment=gat_cora", "task.multi_label=true"], "the data's labels are single-label ((N,) ids); "
                                                       "set task.multi_label=false"),
    (["experiment=gat_cora", "model.layer=attentoin"], "unknown graph_layer 'attentoin'"),
    (["experiment=bert_pretrain_imdb", "model.type_vocab_size=1"],
     "next-sentence prediction needs two segments"),
    # the callbacks entries are typed configs too (attnflow.training.callbacks: CheckpointConfig, ...)
    (["callbacks.attention_maps.examples=-2"], "(at 'callbacks.attention_maps.examples') must be >= 0"),
    (["+callbacks.early_stopping={patience: -3}"], "(at 'callbacks.early_stopping.patience') must be >= 0"),
    (["callbacks.checkpoint.save_top_k=-2"], "must be >= -1 (-1 keeps every checkpoint), got -2"),
    (["callbacks.checkpoint.save_top_k=abc"], "field 'save_top_k' (at 'callbacks.checkpoint.save_top_k') "
                                              "must be int, got 'abc'"),
    (["+callbacks.checkpoint.sav_last=false"], "callbacks.checkpoint has no field 'sav_last' "
                                               "(at 'callbacks.checkpoint.sav_last')"),
    # Trainer arguments Lightning checks only once the data is made, or never (a division by 0)
])
@pytest.mark.slow
def test_a_value_out_of_its_fields_range_is_refused_before_any_work(overrides, says, tmp_path):
    """Bounds live in the fields' annotations (attnflow.config.registry.Range): what torch refused only
    deep inside the build or at the first step (a dropout of 1.5, a negative learning rate, a label
    smoothing of 2), or accepted silently (a negative warm-up, a negative patience), is a
    ConfigError naming the field before anything is read or written; the callbacks entries are
    typed configs as well (a save_top_k of 'abc' failed after config.yaml was written)."""
    with pytest.raises(ConfigError) as err:
        train(compose_cfg(overrides), tmp_path / "run")
    assert says in str(err.value)
    assert not (tmp_path / "run").exists() or not any((tmp_path / "run").iterdir())


@pytest.mark.parametrize("experiment, typed, group_fix, this_block, other_block", [
    ("han_imdb", "model.word_pooling.scorer.name=additive", "pooling.scorer.name=additive",
     "word_pooling", "sentence_pooling"),
    ("reverse_bahdanau", "model.decoder.attention.scorer.name=dot", "attention.scorer.name=dot",
     "decoder", None),
])
@pytest.mark.slow
def test_a_field_typed_under_a_block_an_interpolation_names_is_refused_and_set_on_its_group(
        experiment, typed, group_fix, this_block, other_block):
    """A field typed under a block the files take from a shared group replaces it by a nameless
    block: refused by the block's validation; set on the group, it reaches every reader."""
    path = typed.split("=")[0].rsplit(".", 2)[0]
    with pytest.raises(ConfigError, match=rf"'{path}' needs a 'name'"):
        resolve_config(compose_cfg([f"experiment={experiment}", typed], return_hydra_config=True))
    context = (dict(vocab_size=20, num_classes=2) if experiment == "han_imdb"
               else dict(src_vocab=20, tgt_vocab=20))
    want = typed.rsplit("=", 1)[1]
    model = MODELS.build(resolve_config(compose_cfg([f"experiment={experiment}", group_fix],
                                                    return_hydra_config=True))["model"], **context)
    for part in filter(None, (this_block, other_block)):
        assert {type(s).registry_name for s in getattr(model, part).modules()
                if isinstance(s, Scorer)} == {want}
