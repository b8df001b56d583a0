"""``data.hf_dataset``: Hugging Face data sets, made with ``datasets`` and saved in a temporary
folder (nothing is downloaded), read by every text family: a short run of each through the
training entry point, checked against the data set as ``datasets`` reads it (the ClassLabel
names become labels.json, every training row is read, a missing split or column is one error
naming those there). The HF tokenizers of ``data.tokenizer_from``: tests/test_hf_tokenizers.py."""

from __future__ import annotations

import json
import math
import random
import re

import pytest

from attnflow.config.registry import DATA
from attnflow.data.errors import DataError
from support import compose_cfg

datasets = pytest.importorskip("datasets")
datasets.disable_progress_bars()

QUIET = ["trainer.max_epochs=1", "callbacks.progress_bar=none", "callbacks.attention_maps.examples=0",
         "logger=csv", "trainer.accelerator=cpu", "trainer.enable_model_summary=false"]
HAN = ["experiment=han_imdb", "model.embed_dim=8", "model.word_encoder.hidden_dim=4",
       "model.sentence_encoder.hidden_dim=4", "pooling.dim=4", "data.min_freq=1", "task.renderings=0"]
BERT = ["model.d_model=16", "model.layers=1", "model.ffn_dim=16", "attention.heads=2",
        "data.vocab_size=60", "data.max_len=16"]
WORDS = {"positive": "a moving brilliant film ; the cast is superb and the story wonderful".split(),
         "negative": "dull and far too long ; a boring plot with poor acting".split()}
# not in sorted order, so that the ClassLabel's order is told from the labels sorted
SENTIMENTS = ["positive", "negative"]
TAGS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC", "B-ORG"]  # B-ORG never occurs


def reviews(rng: random.Random, n: int) -> dict:
    ys = [i % 2 for i in range(n)]
    return {"review": [" ".join(rng.choice(WORDS[SENTIMENTS[y]]) for _ in range(10)) + " ."
                       for y in ys], "sentiment": ys}


def sentences(rng: random.Random, n: int) -> dict:
    """Tagged sentences ``{"words": [...], "ner": [tag ids]}`` of people and places."""
    rows = {"words": [], "ner": []}
    for _ in range(n):
        person, place = rng.choice(["Anna Meyer", "Jon Li"]), rng.choice(["Paris", "New York"])
        words = [*person.split(), "flew", "to", *place.split(), "."]
        tags = ["B-PER", "I-PER", "O", "O", "B-LOC", *["I-LOC"] * (len(place.split()) - 1), "O"]
        rows["words"].append(words)
        rows["ner"].append([TAGS.index(t) for t in tags])
    return rows


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """{name: folder} of the data sets, each a DatasetDict written by save_to_disk."""
    root, rng = tmp_path_factory.mktemp("hf_data"), random.Random(0)
    review = datasets.Features({"review": datasets.Value("string"),
                                "sentiment": datasets.ClassLabel(names=SENTIMENTS)})
    tagged = datasets.Features({"words": datasets.Sequence(datasets.Value("string")),
                                "ner": datasets.Sequence(datasets.ClassLabel(names=TAGS))})
    made = {"reviews": datasets.DatasetDict({s: datasets.Dataset.from_dict(reviews(rng, n), features=review)
                                             for s, n in (("train", 36), ("validation", 12), ("test", 10))}),
            "ner": datasets.DatasetDict({s: datasets.Dataset.from_dict(sentences(rng, n), features=tagged)
                                         for s, n in (("train", 30), ("dev", 10))})}
    out = {}
    for name, data in made.items():
        data.save_to_disk(str(root / name))
        out[name] = root / name
    return out


def train_run(tmp_path, overrides):
    from attnflow.training.run import train

    summary = train(compose_cfg([*overrides, *QUIET], return_hydra_config=True), tmp_path / "run")
    return tmp_path / "run", summary


def review_fields(folder):
    return [f"data.hf_dataset={folder}", "data.text_field=review", "data.label_field=sentiment",
            "data.labels=null", "data.batch_size=8", "data.bucket=false"]


def test_documents_take_the_classlabel_names_and_read_every_row(saved, tmp_path):
    """experiment=han_imdb on a saved DatasetDict: labels.json is the ClassLabel's names in its
    order, and one epoch is ⌈rows / batch size⌉ steps."""
    run, summary = train_run(tmp_path, [*HAN, *review_fields(saved["reviews"])])
    data = datasets.load_from_disk(str(saved["reviews"]))
    assert json.loads((run / "labels.json").read_text()) == data["train"].features["sentiment"].names
    assert summary["global_step"] == math.ceil(len(data["train"]) / 8)
    assert json.loads((run / "vocab.json").read_text())["class_names"] == SENTIMENTS


def test_bert_text_classification_reads_the_test_split_too(saved, tmp_path):
    run, summary = train_run(tmp_path, ["experiment=bert_imdb", *BERT, *review_fields(saved["reviews"]),
                                        "test=true"])
    data = datasets.load_from_disk(str(saved["reviews"]))
    assert json.loads((run / "labels.json").read_text()) == SENTIMENTS
    assert summary["global_step"] == math.ceil(len(data["train"]) / 8)
    assert "test/acc" in summary["metrics"]


def test_token_classification_tags_are_the_classlabel_list_names(saved, tmp_path):
    """A Sequence(ClassLabel) column's names are the tags in order, the one never seen included;
    the validation split is named by data.hf_splits."""
    run, summary = train_run(tmp_path, [
        "experiment=bert_tokens", "data=token_classification", *BERT, f"data.hf_dataset={saved['ner']}",
        "data.hf_splits=[train,dev,null]", "data.tokens_field=words", "data.tags_field=ner",
        "data.batch_size=8", "data.bucket=false", "test=false"])
    data = datasets.load_from_disk(str(saved["ner"]))
    assert json.loads((run / "labels.json").read_text()) == data["train"].features["ner"].feature.names
    assert summary["global_step"] == math.ceil(len(data["train"]) / 8)


def test_pretraining_reads_the_text_column(saved, tmp_path):
    overrides = ["experiment=bert_pretrain_imdb", *BERT, "data.max_len=24",
                 f"data.hf_dataset={saved['reviews']}", "data.text_field=review"]
    module = DATA.build(compose_cfg(overrides).data)
    data = datasets.load_from_disk(str(saved["reviews"]))
    assert module.split_texts("train") == list(data["train"]["review"])
    assert module.reads("test")  # the data set has one: read with test=true
    _, summary = train_run(tmp_path, overrides)
    assert summary["epochs"] == 1


def build(folder, **fields):
    base = {"name": "text_classification", "hf_dataset": str(folder), "text_field": "review",
            "label_field": "sentiment"}
    return DATA.build({**base, **fields})


def test_a_missing_split_or_column_is_one_error_naming_those_there(saved):
    with pytest.raises(DataError, match=r"has no split 'dev' \(splits: train, validation, test\); "
                                        r"set data.hf_splits"):
        build(saved["reviews"], hf_splits=["train", "dev", None]).setup()
    with pytest.raises(DataError, match=r"split 'train' has no column 'body' \(columns: review, "
                                        r"sentiment\); set data.text_field"):
        build(saved["reviews"], text_field="body").setup()
    with pytest.raises(DataError, match=r"'stars' \(columns: review, sentiment\); set data.label_field"):
        build(saved["reviews"], label_field="stars").setup()
    with pytest.raises(DataError, match=r"sentiment='positive' is not a class of data.labels \(0, 1\)"):
        build(saved["reviews"], labels=[0, 1]).setup()  # (an IMDB preset's labels: null them)


def test_a_config_name_is_unread_for_a_saved_folder(saved):
    from attnflow.config.registry import AttnflowWarning

    with pytest.warns(AttnflowWarning, match=r"hf_config=plain_text is unread: .*reviews is a folder"):
        assert build(saved["reviews"], hf_config="plain_text").label_names() == SENTIMENTS


def test_labels_given_order_the_classes(saved):
    module = build(saved["reviews"], labels=["negative", "positive"])
    module.setup()
    data = datasets.load_from_disk(str(saved["reviews"]))["validation"]
    names = data.features["sentiment"].names
    want = [["negative", "positive"].index(names[y]) for y in data["sentiment"]]
    assert module.label_names() == ["negative", "positive"]
    assert list(module.splits["val"].labels) == want


def test_an_absent_test_split_is_no_test_split(saved):
    module = DATA.build({"name": "token_classification", "hf_dataset": str(saved["ner"]),
                         "hf_splits": ["train", "dev", "test"], "tokens_field": "words",
                         "tags_field": "ner"})
    assert not module.has_test
    assert "no test split" in module.missing_test() and "split 'test' is absent" in module.missing_test()


def test_one_dataset_without_splits_and_an_offline_hub_name_are_refused(tmp_path, monkeypatch):
    datasets.Dataset.from_dict({"review": ["a"], "sentiment": [0]}).save_to_disk(str(tmp_path / "one"))
    with pytest.raises(DataError, match=r"holds one Dataset without splits; save a DatasetDict"):
        build(tmp_path / "one").setup()
    import huggingface_hub

    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf_home"))
    with pytest.raises(DataError, match=r"hf_dataset=nobody/no-such-set is not a folder, and the Hub "
                                        r"gave no data set \(HF_DATASETS_OFFLINE is set"):
        build("nobody/no-such-set").setup()


def test_bad_split_lists_are_refused_before_any_work(saved):
    from attnflow.config.registry import ConfigError

    with pytest.raises(ConfigError, match=r"hf_splits=\['train', None, 'test'\] must name"):
        build(saved["reviews"], hf_splits=["train", None, "test"])
    with pytest.raises(ConfigError, match=r"has no field 'hf_split' .*Did you mean 'hf_splits'"):
        build(saved["reviews"], hf_split=["train", "validation", None])


def test_translation_pairs_from_a_translation_column_or_language_columns(tmp_path):
    rows = {"fr": ["Un chat dort.", "Deux chiens jouent."], "en": ["A cat sleeps.", "Two dogs play."]}
    pairs = [{"fr": f, "en": e} for f, e in zip(rows["fr"], rows["en"])]
    datasets.DatasetDict({"train": datasets.Dataset.from_dict({"translation": pairs}),
                          "validation": datasets.Dataset.from_dict(rows)}).save_to_disk(str(tmp_path / "mt"))
    module = DATA.build({"name": "parallel", "hf_dataset": str(tmp_path / "mt"), "src_lang": "fr",
                         "tgt_lang": "en", "hf_splits": ["train", "validation", None]})
    assert module.split_text("train") == (rows["fr"], rows["en"]) == module.split_text("val")
    assert "data.hf_splits names none" in module.missing_test()
    other = DATA.build({"name": "parallel", "hf_dataset": str(tmp_path / "mt"), "src_lang": "de",
                        "tgt_lang": "en"})
    with pytest.raises(DataError, match=rf"row 0: 'translation' is {re.escape(repr(pairs[0]))}, not "
                                        rf"a dict of 'de' and 'en' texts"):
        other.split_text("train")
    with pytest.raises(DataError, match=r"neither a 'translation' column .* nor the columns 'de' and "
                                        r"'en' \(columns: fr, en\)"):
        other.split_text("val")


def test_the_documented_example_trains(tmp_path, monkeypatch):
    """docs/data.md's Hugging Face section as written: its Python saves the data set, its command
    trains (with a smaller model); the run's classes are the ClassLabel's names."""
    import shlex

    from support import ROOT

    body = (ROOT / "docs" / "data.md").read_text(encoding="utf-8").split("## Hugging Face datasets\n")[1]
    code = re.search(r"```python\n(.*?)```", body, re.S).group(1)
    command = shlex.split(re.search(r"```bash\n(.*?)```", body, re.S).group(1).replace("\\\n", " "))
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "docs/data.md", "exec"), {})
    assert command[:2] == ["attnflow-train", "experiment=han_imdb"]
    run, _ = train_run(tmp_path, [*command[1:], *HAN[1:]])
    names = datasets.load_from_disk("reviews_hf")["train"].features["sentiment"].names
    assert json.loads((run / "labels.json").read_text()) == names
