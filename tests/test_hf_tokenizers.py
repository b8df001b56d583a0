"""``data.tokenizer_from=hf:<dir>`` for the families that build their own vocabulary (documents,
translation): a tokenizer made here with the ``tokenizers`` library (nothing downloaded), its
special tokens at the ids the family's batches assume, text split as the tokenizer itself splits
it; and short runs of translation and of the self-attentive classifier with it, on Hugging Face
data sets saved in a temporary folder."""

from __future__ import annotations

import json
import random

import pytest
import torch
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from attnflow.config.registry import DATA, ConfigError
from attnflow.data import parallel
from attnflow.data.documents import SPECIALS as DOCUMENT_SPECIALS
from attnflow.data.hf_tokenizers import load_hf_tokenizer
from support import compose_cfg

TEXTS = ["Un chat dort sur le canapé.", "Deux chiens jouent dans le jardin.",
         "A cat sleeps on the sofa.", "Two dogs play in the garden.", "Une femme lit un livre.",
         "A woman reads a book."]
QUIET = ["trainer.max_epochs=1", "callbacks.progress_bar=none", "callbacks.attention_maps.examples=0",
         "logger=csv", "trainer.accelerator=cpu", "trainer.enable_model_summary=false"]
# HF's names, none at attnflow's ids (translation: pad 0, bos 1, eos 2, unk 3)
BERT_SPECIALS = ["[UNK]", "[SEP]", "[MASK]", "[PAD]", "[CLS]"]


def wordpiece_folder(folder, texts=TEXTS):
    """A lower-casing WordPiece trained on ``texts`` in ``folder``, as an HF folder lays it out:
    tokenizer.json and tokenizer_config.json naming the special tokens."""
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    tok.train_from_iterator(texts, trainers.WordPieceTrainer(vocab_size=120, special_tokens=BERT_SPECIALS,
                                                             show_progress=False))
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    names = {f"{s.strip('[]').lower()}_token": s for s in BERT_SPECIALS}
    (folder / "tokenizer_config.json").write_text(json.dumps(names))
    return tok


def subword_folder(folder, kind):
    """A BPE or Unigram tokenizer that names no pad, bos or eos, its unknown token ``<oov>``; a
    tokenizer_config.json naming one token both bos and eos (as GPT-2's does)."""
    if kind == "bpe":
        tok = Tokenizer(models.BPE(unk_token="<oov>"))
        trainer = trainers.BpeTrainer(vocab_size=90, special_tokens=["<oov>", "<|end|>"],
                                      show_progress=False)
    else:
        tok = Tokenizer(models.Unigram())
        trainer = trainers.UnigramTrainer(vocab_size=60, special_tokens=["<oov>", "<|end|>"],
                                          unk_token="<oov>", show_progress=False)
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(TEXTS, trainer)
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({"bos_token": "<|end|>",
                                                              "eos_token": {"content": "<|end|>"}}))
    return tok


@pytest.mark.parametrize("kind", ["bpe", "unigram"])
def test_the_family_specials_come_first_and_text_splits_as_before(tmp_path, kind):
    hf = subword_folder(tmp_path, kind)
    tok = load_hf_tokenizer(f"hf:{tmp_path}", parallel.ROLES, "test")
    # the model's unknown token and the named bos are the folder's; pad and eos (taken) are added
    assert [tok.id_to_token(i) for i in range(4)] == ["<pad>", "<|end|>", "<eos>", "<oov>"]
    assert tok.get_vocab_size() == hf.get_vocab_size() + 2
    for text in [*TEXTS, "Zebras quietly jump!"]:
        want, got = hf.encode(text), tok.encode(text)
        assert got.tokens == want.tokens
        assert [tok.id_to_token(i) for i in got.ids] == [hf.id_to_token(i) for i in want.ids]


def test_a_vocab_txt_folder_is_bert_wordpiece(tmp_path):
    from tokenizers import BertWordPieceTokenizer

    vocab = ["[UNK]", "[PAD]", "[CLS]", "[SEP]", "the", "cat", "sat", "##s", "on", "mat", "."]
    (tmp_path / "vocab.txt").write_text("\n".join(vocab) + "\n")
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": True}))
    tok = load_hf_tokenizer(f"hf:{tmp_path}", tuple(zip(("pad", "unk"), DOCUMENT_SPECIALS)), "test")
    assert [tok.id_to_token(i) for i in range(2)] == ["<pad>", "[UNK]"]  # no pad named: added
    want = BertWordPieceTokenizer(str(tmp_path / "vocab.txt"), lowercase=True)
    text = "The cats SAT on the mat."
    assert tok.encode(text).tokens == want.encode(text, add_special_tokens=False).tokens


def test_tokenizer_from_must_be_an_hf_tokenizer_before_any_work(tmp_path):
    with pytest.raises(ConfigError, match=r"tokenizer_from=runs/bert: give hf:<folder or Hub id>"):
        DATA.build({"name": "documents", "train_path": "a.jsonl", "val_path": "b.jsonl",
                    "tokenizer_from": "runs/bert"})
    with pytest.raises(ConfigError, match=r"tokenizer_from=hf:/nowhere/tok: no such directory"):
        load_hf_tokenizer("hf:/nowhere/tok", parallel.ROLES, "data 'parallel': tokenizer_from")


def train_run(tmp_path, overrides):
    from attnflow.training.run import train

    summary = train(compose_cfg([*overrides, *QUIET]), tmp_path / "run")
    return tmp_path / "run", summary


def test_a_translation_run_tokenizes_as_the_hf_tokenizer(tmp_path):
    """experiment=mt_transformer on an HF data set with WMT's translation column and
    tokenizer_from=hf:<dir>: the run's tokenizer splits as the HF one, its specials the folder's
    at attnflow's ids, and the model's vocabulary is the tokenizer's."""
    datasets = pytest.importorskip("datasets")
    hf = wordpiece_folder(tmp_path / "tok")
    pairs = [{"fr": TEXTS[i], "en": TEXTS[i + 2]} for i in (0, 1)] + [{"fr": TEXTS[4], "en": TEXTS[5]}]
    split = datasets.Dataset.from_dict({"translation": pairs * 4})
    datasets.DatasetDict({"train": split, "validation": split}).save_to_disk(str(tmp_path / "mt"))
    run, _ = train_run(tmp_path, [
        "experiment=mt_transformer", "model.d_model=16", "model.ffn_dim=16", "model.encoder_layers=1",
        "model.decoder_layers=1", "attention.heads=2", "task.beam_size=1", "data.src_lang=fr",
        "data.tgt_lang=en", f"data.hf_dataset={tmp_path / 'mt'}", f"data.tokenizer_from=hf:{tmp_path / 'tok'}",
        "data.batch_size=4", "test=false"])
    tok = Tokenizer.from_file(str(run / "tokenizer" / "shared.json"))
    assert [tok.id_to_token(i) for i in range(4)] == ["[PAD]", "[CLS]", "[SEP]", "[UNK]"]
    assert tok.get_vocab_size() == hf.get_vocab_size()
    for text in [*TEXTS, "Un zèbre saute !"]:
        assert tok.encode(text).tokens == hf.encode(text).tokens
    state = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]
    assert state["model.src_embedding.weight"].shape[0] == hf.get_vocab_size()


def test_self_attentive_words_are_the_hf_tokenizers_pieces(tmp_path):
    """experiment=self_attentive_imdb with tokenizer_from=hf:<dir>: the saved vocabulary is the
    tokenizer's, pad and unknown first, and prediction splits a text as the tokenizer does."""
    datasets = pytest.importorskip("datasets")
    from attnflow.data.documents import encode_texts
    from attnflow.inference.documents import load

    hf = wordpiece_folder(tmp_path / "tok")
    split = datasets.Dataset.from_dict({"text": TEXTS * 3, "label": [0, 0, 1, 1, 0, 1] * 3})
    datasets.DatasetDict({"train": split, "validation": split}).save_to_disk(str(tmp_path / "docs"))
    run, _ = train_run(tmp_path, [
        "experiment=self_attentive_imdb", "model.embed_dim=8", "model.encoder.hidden_dim=4",
        "model.hops=2", "model.attn_dim=4", "model.mlp_dim=4", f"data.hf_dataset={tmp_path / 'docs'}",
        f"data.tokenizer_from=hf:{tmp_path / 'tok'}", "data.batch_size=6"])
    _, art = load(run)
    vocab = art["vocab_obj"]
    assert vocab.itos[:2] == ["[PAD]", "[UNK]"] and len(vocab) == hf.get_vocab_size()
    rng = random.Random(0)
    text = " ".join(rng.sample(" ".join(TEXTS).split(), 8)).replace(".", "") + " zèbre"
    _, shown = encode_texts([text], vocab, 30, 50)
    assert shown == [[hf.encode(text).tokens]]
    assert json.loads((run / "labels.json").read_text()) == ["0", "1"]  # (plain ints: sorted)
