"""``model.init_from=hf:<dir>``: BERT from a Hugging Face checkpoint. A small random
``BertForPreTraining`` saved with ``save_pretrained`` is the peer: attnflow's hidden states, MLM
and NSP logits equal HF's on text both tokenizers encode alike; a config attnflow cannot compute
is refused naming the field; a fine-tuning run starts from it. Nothing is downloaded."""

from __future__ import annotations

import json
import logging

import pytest
import torch

from attnflow.config.registry import MODELS, ConfigError
from attnflow.data.corpus import hf_tokenizer
from attnflow.models import bert_hf

transformers = pytest.importorskip("transformers")

WORDS = ("the a film was good bad movie great plot story act acting cast , . "
         "##s ##ing ##ed é café Film").split()
# HF's layout: [PAD] first, unused slots, then the other specials (bert-base-uncased: 0, 100–103)
VOCAB = ["[PAD]", "[unused0]", "[unused1]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]
TEXTS = ["the films was good .", "a bad movie , the acting cast", "Café plot story"]


def save_checkpoint(folder, lowercase=True, bin_file=False, **config):
    """A random HF BertForPreTraining (its biases and LayerNorms moved off their init, so every
    tensor matters) with its vocab.txt and tokenizer files, in ``folder``; returns the model."""
    from transformers import BertConfig, BertForPreTraining, BertTokenizerFast

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    torch.manual_seed(0)
    sizes = dict(vocab_size=len(VOCAB), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                 intermediate_size=64, max_position_embeddings=40, type_vocab_size=2)
    model = BertForPreTraining(BertConfig(**{**sizes, **config})).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias") or "LayerNorm" in name:
                p.add_(torch.randn_like(p) * 0.1)
    if bin_file:
        model.config.save_pretrained(folder)
        torch.save(model.state_dict(), folder / "pytorch_model.bin")
    else:
        model.save_pretrained(folder)
    BertTokenizerFast(str(folder / "vocab.txt"), do_lower_case=lowercase).save_pretrained(folder)
    return model


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    folder = tmp_path_factory.mktemp("hf") / "bert"
    return save_checkpoint(folder), folder


def hf_inputs(folder, texts=TEXTS):
    from transformers import BertTokenizerFast

    return BertTokenizerFast.from_pretrained(str(folder))(texts, padding=True, return_tensors="pt")


def to_ours(ids, folder):
    """HF token ids as attnflow's (the vocabulary in attnflow's order)."""
    order = torch.tensor(bert_hf.specials_first(bert_hf.vocabulary(folder), "test"))
    inverse = torch.empty_like(order)
    inverse[order] = torch.arange(len(order))
    return inverse[ids], order


def attnflow_bert(folder, **fields):
    arch = bert_hf.architecture(folder)
    return MODELS.build({"name": "bert", **arch, "init_from": f"hf:{folder}", **fields},
                        vocab_size=len(VOCAB), pad_id=0, num_classes=3).eval()


@pytest.mark.parametrize("bin_file", [False, True], ids=["safetensors", "pytorch_model.bin"])
def test_hidden_states_mlm_and_nsp_logits_equal_hf(tmp_path, bin_file):
    hf = save_checkpoint(tmp_path / "ckpt", bin_file=bin_file)
    ours = attnflow_bert(tmp_path / "ckpt")
    enc = hf_inputs(tmp_path / "ckpt")
    ids, order = to_ours(enc["input_ids"], tmp_path / "ckpt")
    real = enc["attention_mask"].bool()
    with torch.no_grad():
        want = hf(**enc, output_hidden_states=True)
        hidden = ours(ids, enc["token_type_ids"], real)
        assert torch.allclose(hidden[real], want.hidden_states[-1][real], atol=1e-5)
        mlm = ours.mlm_logits(hidden)[..., torch.argsort(order)]  # back to HF's id order
        print(f"\n{'bin' if bin_file else 'safetensors'}: max |Δ| hidden "
              f"{(hidden - want.hidden_states[-1])[real].abs().max():.1e}, MLM "
              f"{(mlm - want.prediction_logits)[real].abs().max():.1e}, NSP "
              f"{(ours.nsp_logits(hidden) - want.seq_relationship_logits).abs().max():.1e}")  # (-s)
        assert torch.allclose(mlm[real], want.prediction_logits[real], atol=1e-5)
        assert torch.allclose(ours.nsp_logits(hidden), want.seq_relationship_logits, atol=1e-5)
        fresh = MODELS.build({"name": "bert", **bert_hf.architecture(tmp_path / "ckpt")},
                             vocab_size=len(VOCAB), pad_id=0).eval()
        assert not torch.allclose(fresh(ids, enc["token_type_ids"], real)[real],
                                  want.hidden_states[-1][real], atol=1e-2)  # not so by chance


@pytest.mark.parametrize("files", ["tokenizer.json", "vocab.txt"])
@pytest.mark.parametrize("lowercase", [True, False])
def test_tokenizer_encodes_as_hfs_in_attnflows_id_order(tmp_path, files, lowercase):
    save_checkpoint(tmp_path, lowercase=lowercase)
    if files == "vocab.txt":  # the case and accents then come from tokenizer_config.json
        (tmp_path / "tokenizer.json").unlink()
    tok = hf_tokenizer(f"hf:{tmp_path}", "test")
    assert [tok.token_to_id(s) for s in bert_hf.SPECIALS] == [0, 1, 2, 3, 4]
    enc = hf_inputs(tmp_path)
    want, _ = to_ours(enc["input_ids"], tmp_path)
    for row, got in zip(want, tok.encode_batch(TEXTS, add_special_tokens=False)):
        assert row[row != 0].tolist() == [2, *got.ids, 3]
    assert tok.encode("Film", add_special_tokens=False).tokens == (["film"] if lowercase else ["Film"])


def test_loading_reports_and_the_fresh_head(checkpoint, caplog):
    _, folder = checkpoint
    with caplog.at_level(logging.INFO, logger="attnflow.models.bert"):
        ours = attnflow_bert(folder, head="token")
    assert ours.classifier.out_features == 3
    line = [r.getMessage() for r in caplog.records if "loaded" in r.getMessage()]
    assert len(line) == 1 and str(folder) in line[0] and "new: classifier.weight, classifier.bias" in line[0]
    assert "cls.predictions" not in line[0]  # unused MLM/NSP tensors are named by attnflow's names
    assert "unused: mlm_decoder.bias, mlm_norm.bias" in line[0]


@pytest.mark.parametrize("field, value", [("hidden_act", "gelu_new"), ("model_type", "roberta"),
                                          ("position_embedding_type", "relative_key"),
                                          ("is_decoder", True)])
def test_a_config_attnflow_cannot_compute_is_refused_naming_the_field(checkpoint, tmp_path, field, value):
    _, folder = checkpoint
    for f in folder.iterdir():
        (tmp_path / f.name).write_bytes(f.read_bytes())
    conf = json.loads((folder / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**conf, field: value}))
    with pytest.raises(ConfigError, match=rf"config.json has {field}={value!r}; attnflow's bert computes"):
        bert_hf.architecture(tmp_path)


def test_missing_files_and_offline_hub_ids_are_one_line_refusals(tmp_path, monkeypatch):
    pytest.importorskip("huggingface_hub")
    with pytest.raises(ConfigError, match=r"hf:/nowhere/bert: no such directory"):
        bert_hf.checkpoint_dir("hf:/nowhere/bert")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match=r"config.json is missing"):
        bert_hf.architecture(tmp_path / "empty")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hub"))
    with pytest.raises(ConfigError, match=r"HF_HUB_OFFLINE is set and it is not in the cache") as err:
        bert_hf.checkpoint_dir("hf:bert-base-uncased")
    assert "\n" not in str(err.value)


def test_a_hub_id_is_fetched_with_huggingface_hub(checkpoint, monkeypatch):
    """hf:<id> asks huggingface_hub for the checkpoint's files only (here answered from the
    local folder: the tests never download) and reads what it returns."""
    hub = pytest.importorskip("huggingface_hub")
    asked = []
    monkeypatch.setattr(hub, "snapshot_download",
                        lambda repo, allow_patterns: asked.append((repo, allow_patterns)) or str(checkpoint[1]))
    assert bert_hf.checkpoint_dir("hf:prajjwal1/bert-mini") == checkpoint[1]
    assert asked == [("prajjwal1/bert-mini", list(bert_hf.FILES))]
    assert bert_hf.architecture(bert_hf.checkpoint_dir("hf:bert-base-uncased"))["d_model"] == 32


@pytest.mark.slow
def test_a_fine_tuning_run_starts_from_the_checkpoint(checkpoint, tmp_path, caplog):
    """experiment=bert_imdb with model.init_from=hf:<dir>: the architecture comes from
    config.json (a typed field it replaces: one warning), the encoder from the weights, the
    tokenizer is the checkpoint's, saved with the run; the saved config rebuilds the model."""
    import yaml

    from attnflow.io.console import AttnflowWarning
    from attnflow.training.run import train
    from support import compose_cfg

    import shutil

    folder = tmp_path / "bert"  # (moved away below)
    shutil.copytree(checkpoint[1], folder)
    rows = [{"text": t, "label": i % 2} for i, t in enumerate(TEXTS * 6)]
    for split in ("train", "dev"):
        (tmp_path / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    run = tmp_path / "run"
    command = ["experiment=bert_imdb", f"model.init_from=hf:{folder}", "model.d_model=48",
               f"data.train_path={tmp_path / 'train.jsonl'}", f"data.val_path={tmp_path / 'dev.jsonl'}",
               "data.test_path=", "data.max_len=16", "data.batch_size=8", "trainer.max_steps=2",
               "callbacks.progress_bar=none", "callbacks.attention_maps.examples=0", "logger=csv"]
    with caplog.at_level(logging.INFO, logger="attnflow.models.bert"), \
            pytest.warns(AttnflowWarning, match=r"model.d_model=48 is unread: model.init_from=hf:"):
        summary = train(compose_cfg(command, return_hydra_config=True), run)
    assert summary["global_step"] == 2
    saved = yaml.safe_load((run / "config.yaml").read_text())["model"]
    assert (saved["d_model"], saved["layers"], saved["attention"]["heads"], saved["norm_eps"]) == (
        32, 2, 4, 1e-12)
    groups = yaml.safe_load((run / "config.yaml").read_text())
    assert groups["attention"] == saved["attention"] and groups["scorer"] == {"name": "scaled_dot"}
    assert any("loaded" in r.getMessage() and str(folder) in r.getMessage() for r in caplog.records)
    tok = hf_tokenizer(f"hf:{folder}", "test")
    from tokenizers import Tokenizer
    kept = Tokenizer.from_file(str(run / "tokenizer" / "wordpiece.json"))
    assert kept.get_vocab() == tok.get_vocab()
    folder.rename(tmp_path / "moved")  # resuming reads the run's own checkpoint and tokenizer
    from attnflow.training.resume import from_hydra

    resumed = from_hydra(compose_cfg([f"resume={run}", "trainer.max_steps=3"]), ["trainer.max_steps=3"])
    again = train(resumed, run)
    assert again["global_step"] == 3


@pytest.mark.slow
def test_token_classification_and_multitask_start_from_it(checkpoint, tmp_path, caplog):
    """experiment=bert_tokens trains from the checkpoint (its tokenizer tags the generated
    sentences); bert_imdb_multitask takes its architecture and tokenizer too."""
    from attnflow.training.run import train
    from attnflow.training.validate import resolve_config
    from support import compose_cfg

    _, folder = checkpoint
    with caplog.at_level(logging.INFO, logger="attnflow.models.bert"):
        summary = train(compose_cfg([
            "experiment=bert_tokens", f"model.init_from=hf:{folder}", "data.train_size=40",
            "data.val_size=10", "data.test_size=0", "test=false", "data.max_len=32",
            "trainer.max_steps=2", "callbacks.progress_bar=none",
            "callbacks.attention_maps.examples=0", "logger=csv"]), tmp_path / "tok")
    assert summary["global_step"] == 2
    line = next(r.getMessage() for r in caplog.records if "loaded" in r.getMessage())
    assert "new: classifier.weight, classifier.bias" in line
    cfg = resolve_config(compose_cfg(["experiment=bert_imdb_multitask", f"model.init_from=hf:{folder}",
                                      "data.common.max_len=32"]))
    assert (cfg["model"]["d_model"], cfg["model"]["layers"]) == (32, 2)
    assert cfg["data"]["common"]["tokenizer_from"] == f"hf:{folder}"
