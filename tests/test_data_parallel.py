"""The parallel-text data module: files, tokenisers (trained on train, saved with the run),
length-bucketed batches, both directions, runs without a test split; and the translation metrics."""

import gzip

import pytest
import torch

from attnflow.config.registry import ConfigError
from attnflow.data.parallel import BOS, EOS, PAD, ParallelDataModule
from attnflow.tasks.translation_metrics import corpus_bleu, word_error_rate
from attnflow.training.run import train
from support import compose_cfg

EN = ["A man sleeps on a green sofa.", "Two dogs play in the snow.", "A girl, smiling, runs home!",
      "The boy's T-shirt is blue.", "People walk down a busy street."] * 4
DE = ["Ein Mann schläft auf einem grünen Sofa.", "Zwei Hunde spielen im Schnee.",
      "Ein Mädchen läuft lächelnd nach Hause!", "Das T-Shirt des Jungen ist blau.",
      "Leute gehen eine belebte Straße entlang."] * 4


@pytest.fixture
def corpus(tmp_path):
    root = tmp_path / "corpus"
    root.mkdir()
    for split, n in (("train", 20), ("val", 5), ("test", 5)):
        (root / f"{split}.en").write_text("\n".join(EN[:n]) + "\n", encoding="utf-8")
        with gzip.open(root / f"{split}.de.gz", "wt", encoding="utf-8") as f:  # plain and .gz mixed
            f.write("\n".join(DE[:n]) + "\n")
    return root


def module(root, **kw):
    kw = {"vocab_size": 120, "batch_size": 4, "test": "test", **kw}
    return ParallelDataModule(root=str(root), **kw)


@pytest.mark.parametrize("kind", ["bpe", "wordpiece"])
@pytest.mark.parametrize("src,tgt", [("de", "en"), ("en", "de")])
def test_round_trip_batches_and_references(corpus, kind, src, tgt):
    dm = module(corpus, tokenizer=kind, src_lang=src, tgt_lang=tgt)
    dm.setup()
    ctx = dm.task_context()
    assert (ctx["pad_id"], ctx["bos_id"], ctx["eos_id"]) == (PAD, BOS, EOS)
    refs = EN if tgt == "en" else DE
    batch = next(iter(dm.val_dataloader()))
    assert set(batch) == {"src", "src_lengths", "tgt_in", "tgt_out", "idx"}
    for i, j in enumerate(batch["idx"].tolist()):
        assert dm.detokenize(batch["tgt_out"][i].tolist()) == refs[j]  # detokenisation is exact
        L = int(batch["src_lengths"][i])
        assert (batch["src"][i, L:] == PAD).all() and (batch["src"][i, :L] != PAD).all()
        assert batch["tgt_in"][i, 0] == BOS
        n = int((batch["tgt_out"][i] != PAD).sum())
        assert batch["tgt_out"][i, n - 1] == EOS
        assert torch.equal(batch["tgt_in"][i, 1:n], batch["tgt_out"][i, : n - 1])
    assert dm.references("val", [1, 0]) == [refs[1], refs[0]]


def test_lowercase_folds_case_on_both_sides_and_in_the_saved_tokenizer(corpus, tmp_path):
    """data.lowercase (Wu et al. 2021's lower-cased Multi30k): the tokenizer lower-cases before
    splitting, so "Ein" and "ein" are one subword sequence, the decoded targets are the
    references lower-cased, and a tokenizer read back from the run folder does the same."""
    dm = module(corpus, src_lang="en", tgt_lang="de", lowercase=True, shared_vocab=True)
    dm.set_run_dir(tmp_path / "run")
    dm.setup()
    assert dm.encode_source(["Ein Hund"]) == dm.encode_source(["ein hund"])
    batch = next(iter(dm.val_dataloader()))
    for i, j in enumerate(batch["idx"].tolist()):
        assert dm.detokenize(batch["tgt_out"][i].tolist()) == DE[j].lower()
    assert dm.references("val", [0]) == [DE[0]]  # references stay as written (cased BLEU too)
    again = module(corpus, src_lang="en", tgt_lang="de", lowercase=False, shared_vocab=True)
    again.load_tokenizers(tmp_path / "run" / "tokenizer")
    assert again.encode_source(["Zwei Hunde"]) == dm.encode_source(["zwei hunde"])
    cased = module(corpus, src_lang="en", tgt_lang="de", shared_vocab=True)
    cased.setup()
    assert cased.encode_source(["Ein Hund"]) != cased.encode_source(["ein hund"])


def test_tokenizers_saved_in_run_dir_and_reused(corpus, tmp_path):
    run = tmp_path / "run"
    dm = module(corpus)
    dm.set_run_dir(run)
    ctx = dm.model_context()
    assert (run / "tokenizer" / "de.json").is_file() and (run / "tokenizer" / "en.json").is_file()
    # a second module loads them from the run dir without reading the training data
    (corpus / "train.en").unlink()
    dm2 = module(corpus)
    dm2.set_run_dir(run)
    assert dm2.model_context() == ctx
    assert dm2.encode_source(["Zwei Hunde."]) == dm.encode_source(["Zwei Hunde."])


@pytest.mark.parametrize("shared", [False, True])
def test_the_checkpoint_artifacts_stand_in_for_a_missing_tokenizer_folder(corpus, tmp_path, shared):
    """artifacts() (stored in every checkpoint) carries both tokenizers: a module given them and
    an empty folder encodes and decodes as the trained one; without them the error names the
    missing files."""
    dm = module(corpus, shared_vocab=shared)
    dm.set_run_dir(tmp_path / "run")
    ctx = dm.model_context()
    art = dm.artifacts()
    again = module(corpus, shared_vocab=shared)
    again.load_tokenizers(tmp_path / "elsewhere", art)
    assert again.model_context() == ctx and (again.src_tok is again.tgt_tok) == shared
    line = "Zwei Hunde spielen."
    assert again.encode_source([line]) == dm.encode_source([line])
    ids = dm.tgt_tok.encode("Two dogs play.").ids
    assert again.detokenize(ids) == dm.detokenize(ids)
    with pytest.raises(FileNotFoundError, match="no tokenizer file .*elsewhere.*carries no tokenizers"):
        module(corpus, shared_vocab=shared).load_tokenizers(tmp_path / "elsewhere", {})


def test_shared_vocab_one_tokenizer(corpus, tmp_path):
    dm = module(corpus, shared_vocab=True)
    dm.set_run_dir(tmp_path)
    ctx = dm.model_context()
    assert ctx["src_vocab"] == ctx["tgt_vocab"] and dm.src_tok is dm.tgt_tok
    assert (tmp_path / "tokenizer" / "shared.json").is_file()


def test_tokenizer_sees_only_train(corpus):
    (corpus / "val.en").write_text("Zebras xylophone quizzically.\n" * 5, encoding="utf-8")
    dm = module(corpus, vocab_size=400)
    dm.setup()
    ids = dm.tgt_tok.encode("Zebras xylophone").ids
    assert dm.tgt_tok.token_to_id("▁Zebras") is None and len(ids) > 2


def test_missing_file_and_misaligned_files_say_so(corpus, tmp_path):
    with pytest.raises(FileNotFoundError, match=r"missing file .*nowhere.*train\.de.*paths.data_dir"):
        module(tmp_path / "nowhere").model_context()
    (corpus / "val.en").write_text("one line\n", encoding="utf-8")
    dm = module(corpus)
    with pytest.raises(ValueError, match="line-aligned"):
        dm.setup()


def test_max_pairs_and_length_cap(corpus):
    dm = module(corpus, max_pairs=7, max_tgt_len=9)
    dm.setup()
    assert len(dm.splits["val"]) == 5
    assert all(len(t) <= 9 for _, _, t in dm.splits["train"]) and len(dm.splits["train"]) <= 7


def test_bleu_of_reference_against_itself_is_100_and_wer():
    refs = EN[:5]
    score, sig = corpus_bleu(refs, refs)
    assert score == pytest.approx(100.0)
    assert "tok:13a" in sig and "nrefs:1" in sig
    assert corpus_bleu([r.lower() for r in refs], refs, lowercase=True)[0] == pytest.approx(100.0)
    assert corpus_bleu([r.lower() for r in refs], refs)[0] < 100.0
    # 1 substitution in 3 words + 2 deletions of 2 words: (1 + 2) / 5
    assert word_error_rate(["a b x", ""], ["a b c", "d e"]) == pytest.approx(0.6)


def test_multi_reference_bleu_takes_the_best_matching_reference():
    """A hypothesis equal to one of several references scores 100; fewer references for some
    sentences are repeated (clipping and closest length are unchanged by a repeat)."""
    hyps = ["a red circle left of a blue square", "a green triangle"]
    refs = [["a blue square right of a red circle", "a red circle left of a blue square"],
            ["a green triangle"]]
    assert corpus_bleu(hyps, refs)[0] == pytest.approx(100.0)
    assert corpus_bleu(hyps, [r[0] for r in refs])[0] < 100.0
    from attnflow.tasks.translation_metrics import reference_streams
    assert reference_streams(refs) == [[refs[0][0], refs[1][0]], [refs[0][1], refs[1][0]]]
    assert word_error_rate(hyps, refs) == pytest.approx(word_error_rate(hyps, [r[0] for r in refs]))
    with pytest.raises(ValueError, match="at least one reference"):
        corpus_bleu(["x"], [[]])


def test_a_split_is_two_files_or_a_pattern_here_or_under_root(tmp_path, monkeypatch):
    """[source, target] and a {lang} pattern name files in the working directory, else under
    data.root; a stem needs data.root; a missing file names both places."""
    from attnflow.config.registry import DATA, ConfigError
    from attnflow.data.errors import DataError

    pairs = [("ein Hund", "a dog"), ("eine Katze", "a cat"), ("zwei Hunde", "two dogs")]
    (tmp_path / "root").mkdir()
    for folder, stem in ((tmp_path, "mine"), (tmp_path / "root", "theirs")):
        (folder / f"{stem}.de").write_text("".join(d + "\n" for d, _ in pairs))
        (folder / f"{stem}.en").write_text("".join(e + "\n" for _, e in pairs))
    monkeypatch.chdir(tmp_path)
    dm = DATA.build({"name": "parallel", "root": str(tmp_path / "root"), "train": ["mine.de", "mine.en"],
                     "val": "theirs.{lang}", "test": None, "vocab_size": 30})
    assert dm.split_text("train") == dm.split_text("val") == ([d for d, _ in pairs], [e for _, e in pairs])
    assert dm.missing_test() and "data.test is null" in dm.missing_test()
    with pytest.raises(ConfigError, match=r"data.train=train is a file stem under data.root"):
        DATA.build({"name": "parallel", "root": "", "train": "train"})
    with pytest.raises(ConfigError, match=r"must be a file stem, a pattern with \{lang\}, or two files"):
        DATA.build({"name": "parallel", "root": "r", "train": ["a.de"]})
    gone = DATA.build({"name": "parallel", "root": str(tmp_path / "root"), "train": "nope.{lang}"})
    with pytest.raises(DataError, match=r"data.train names nope.de, which is not a file \(nor .*root/nope.de\)"):
        gone.split_text("train")


# -- runs without a test split --------------------------------------------------------------------
SMALL_MT = ["experiment=mt_transformer", "model.d_model=16", "model.ffn_dim=16", "model.encoder_layers=1",
            "model.decoder_layers=1", "attention.heads=2", "data.vocab_size=60", "data.batch_size=4",
            "task.beam_size=1", "trainer.max_epochs=1", "trainer.limit_train_batches=2",
            "trainer.limit_val_batches=1", "callbacks.progress_bar=none",
            "callbacks.attention_maps.examples=0", "logger=none"]


def _train_and_val_only(root):
    """Multi30k's layout with the training and validation files and no test file."""
    root.mkdir()
    for split, n in (("train", 20), ("val", 5)):
        (root / f"{split}.en").write_text("\n".join(EN[:n]) + "\n", encoding="utf-8")
        (root / f"{split}.de").write_text("\n".join(DE[:n]) + "\n", encoding="utf-8")
    return root


@pytest.mark.slow
@pytest.mark.parametrize("test_field", [[], ["data.test=null"]])
def test_a_run_with_test_false_needs_no_test_file(tmp_path, test_field):
    root = _train_and_val_only(tmp_path / "m30k")
    cfg = compose_cfg([*SMALL_MT, f"data.root={root}", "test=false", *test_field])
    summary = train(cfg, tmp_path / "run")
    assert summary["epochs"] == 1 and summary["metrics"]
    assert not any(k.startswith("test/") for k in summary["metrics"])


@pytest.mark.parametrize("test_field, why", [
    ([], r"missing file .*m30k/test_2016_flickr\.de.*ATTNFLOW_DATA_DIR"),
    (["data.test=null"], r"data\.test is null, so there is no test split; run with test=false")])
def test_a_tested_run_without_its_test_split_stops_before_training(tmp_path, test_field, why):
    """test=true: a missing test file, or data.test=null, is one error before any checkpoint."""
    root = _train_and_val_only(tmp_path / "m30k")
    with pytest.raises(ConfigError, match=why):
        train(compose_cfg([*SMALL_MT, f"data.root={root}", *test_field]), tmp_path / "run")
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_setup_reads_the_test_file_only_when_tested(tmp_path):
    dm = module(_train_and_val_only(tmp_path / "m30k"), test="test")
    dm.setup()  # (fit)
    assert set(dm.splits) == {"train", "val"}
    with pytest.raises(FileNotFoundError, match=r"test\.de.*paths\.data_dir="):
        dm.missing_test()
    (tmp_path / "m30k" / "test.de").write_text("\n".join(DE[:3]) + "\n", encoding="utf-8")
    (tmp_path / "m30k" / "test.en").write_text("\n".join(EN[:3]) + "\n", encoding="utf-8")
    assert dm.missing_test() is None
    assert len(next(iter(dm.test_dataloader()))["idx"]) == 3
