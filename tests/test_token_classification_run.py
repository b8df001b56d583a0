"""experiment=bert_tokens end to end through attnflow-train (a short run on the generated NER set
learns well past the majority tag), attnflow-predict's tags on that run against the model rebuilt
here, attnflow-eval on its test split, and the worked example of docs/data.md as documented."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import torch

from attnflow.cli.evaluate import main as eval_main
from attnflow.cli.predict import main
from attnflow.config.registry import MODELS
from attnflow.data.corpus import CLS, SEP
from attnflow.data.synthetic_ner import TAGS, draw_splits
from cli_runs import one_torch_thread  # noqa: F401
from support import ROOT, train_cli

SIZES = ["data.train_size=600", "data.val_size=150", "data.test_size=100"]
QUIET = ["trainer.accelerator=cpu", "callbacks.progress_bar=none", "logger=csv",
         "callbacks.attention_maps.examples=0", "trainer.enable_model_summary=false"]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """attnflow-train experiment=bert_tokens: 100 steps (5+ epochs of 19 batches), max_len 24."""
    path = tmp_path_factory.mktemp("bert_tokens") / "run"
    with pytest.MonkeyPatch.context() as mp:
        assert train_cli(mp, "experiment=bert_tokens", *SIZES, *QUIET, "data.max_len=24",
                         "trainer.max_steps=100", "trainer.max_epochs=10",
                         f"hydra.run.dir={path}") == 0
    return path


@pytest.mark.slow
def test_a_short_run_learns_well_past_the_majority_tag(run):
    summary = json.loads((run / "metrics.json").read_text())
    m = summary["metrics"]
    val = draw_splits((600, 150, 100), 1234)["val"]
    majority = sum(t == "O" for _, tags in val for t in tags) / sum(len(tags) for _, tags in val)
    assert 0.5 < majority < 0.75  # every word tagged O would score this
    assert m["best/val/acc"] > majority + 0.15, (majority, m)
    assert m["best/val/f1"] > 0.5 and m["test/f1"] > 0.5, m
    assert {"best/val/precision", "best/val/recall", "test/acc", "test/precision", "test/recall"} <= set(m)
    assert summary["global_step"] == 100
    # the best checkpoint is chosen by the entity F1 (the experiment's monitor)
    cfg = torch.load(run / "checkpoints" / "last.ckpt", weights_only=False)["attnflow_config"]
    assert cfg["callbacks"]["checkpoint"]["monitor"] == "val/f1"


def _rebuild(run):
    """The model and tokenizer from the run's files, without attnflow's prediction code."""
    from tokenizers import Tokenizer

    ckpt = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    best = json.loads((run / "metrics.json").read_text()).get("best_checkpoint")
    if best:
        ckpt = torch.load(best, weights_only=True)
    tok = Tokenizer.from_file(str(run / "tokenizer" / "wordpiece.json"))
    names = ckpt["attnflow_artifacts"]["class_names"]
    model = MODELS.build(ckpt["attnflow_config"]["model"], vocab_size=tok.get_vocab_size(),
                         pad_id=0, num_classes=len(names))
    model.load_state_dict({k[6:]: v for k, v in ckpt["state_dict"].items() if k.startswith("model.")})
    return model.eval(), tok, names


@pytest.mark.slow
def test_predict_tags_every_word_as_the_model_does(run, tmp_path, capsys):
    model, tok, names = _rebuild(run)
    assert names == list(TAGS)
    lines = ["Anna Meyer flew from Rio de Janeiro to Jordan .", "",
             " ".join(["Jordan lives in Buenos Aires ."] * 4)]  # 24 words: past data.max_len=24
    assert main([str(run), *lines, "--json", "--batch-size", "2"]) == 0
    cap = capsys.readouterr()
    out = cap.out.splitlines()
    assert len(out) == 3
    assert json.loads(out[1]) == {"words": [], "tags": [], "probabilities": [], "text": "",
                                  "empty": True}
    for i in (0, 2):
        words = lines[i].split()
        pieces = [tok.encode(w, add_special_tokens=False).ids for w in words]  # a word at a time
        first = np.cumsum([1] + [len(p) for p in pieces[:-1]])  # its first piece's position
        ids = [CLS, *[x for p in pieces for x in p]][:23] + [SEP]
        with torch.no_grad():
            x = torch.tensor([ids])
            probs = torch.softmax(model.token_logits(model(x, torch.zeros_like(x), x > -1)), -1)[0]
        kept = first[first < 23]
        got = json.loads(out[i])
        assert got["words"] == words and got["text"] == lines[i]
        past = [None] * (len(words) - len(kept))
        assert got["tags"] == [names[int(probs[t].argmax())] for t in kept] + past
        assert got["probabilities"][len(kept):] == past
        np.testing.assert_allclose(got["probabilities"][:len(kept)], probs[kept].max(-1).values,
                                   atol=1e-5)
    assert len(json.loads(out[2])["words"]) > len(kept) and "argument 2 is empty" in cap.err
    assert re.search(r"argument 3 has 24 words; the model reads at most 22 subwords \(the run's "
                     r"data.max_len=24\): its last \d+ words are not tagged", cap.err)
    # plain lines: word/TAG, '-' past the cut and for an empty line
    assert main([str(run), *lines]) == 0
    plain = capsys.readouterr().out.splitlines()
    for text, js in zip(plain, out):
        r = json.loads(js)
        want = " ".join(f"{w}/{t or '-'}" for w, t in zip(r["words"], r["tags"])) or "-"
        assert text == want
    tag = "|".join(re.escape(t) for t in [*TAGS, "-"])
    assert all(re.fullmatch(rf"\S+/({tag})", w) for w in plain[0].split() + plain[2].split())


@pytest.mark.slow
def test_predict_reads_jsonl_word_lists_and_refuses_what_it_cannot_read(run, tmp_path, capsys):
    f = tmp_path / "in.jsonl"
    f.write_text(json.dumps({"tokens": ["New York", "is", "big"]}) + "\n")
    assert main([str(run), "--file", str(f), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["words"] == ["New York", "is", "big"]
    f.write_text(json.dumps({"text": "a b"}) + "\n")
    assert main([str(run), "--file", str(f)]) == 2
    assert "in.jsonl line 1 has no list of words in 'tokens'" in capsys.readouterr().err
    assert main([str(run), "x", "--top-k", "3"]) == 0
    assert "--top-k: not read for the run" in capsys.readouterr().err


@pytest.mark.slow
def test_eval_scores_the_test_split_as_training_did_and_a_file_of_it(run, tmp_path):
    summary = json.loads((run / "metrics.json").read_text())["metrics"]
    assert eval_main([str(run), "-o", str(tmp_path / "m.json")]) == 0
    got = json.loads((tmp_path / "m.json").read_text())["metrics"]
    for k in ("test/f1", "test/acc", "test/precision", "test/recall"):
        assert got[k] == pytest.approx(summary[k], abs=1e-5), k
    # the same test sentences as a CoNLL file, through the file module: only that file is read
    from attnflow.data.synthetic_ner import write_splits

    test_file = write_splits(tmp_path / "ner", (600, 150, 100), seed=1234)[2]
    assert eval_main([str(run), "data.name=token_classification", f"data.test_path={test_file}",
                      "data.max_len=24", "-o", str(tmp_path / "f.json")]) == 0
    again = json.loads((tmp_path / "f.json").read_text())
    assert again["metrics"] == pytest.approx(got, abs=1e-5)
    assert again["data"]["train_path"].endswith("conll/train.conll")  # the preset's, absent here


@pytest.mark.slow
def test_the_documented_worked_example_trains(tmp_path):
    """docs/data.md's "Token classification": its example file as train and dev, its command."""
    section = (ROOT / "docs" / "data.md").read_text().split("## Token classification", 1)[1]
    section = section.split("\n## ", 1)[0]
    example = re.search(r"```text\n(.*?)```", section, re.S).group(1)
    command = re.search(r"```bash\n(attnflow-train [^\n]*)\n```", section).group(1).split()[1:]
    for name in ("train.conll", "dev.conll"):
        (tmp_path / name).write_text(example)
    args = [a.replace("train.conll", str(tmp_path / "train.conll"))
            .replace("dev.conll", str(tmp_path / "dev.conll")) for a in command]
    assert "data=token_classification" in args and "data.test_path=" in args
    run = tmp_path / "run"
    with pytest.MonkeyPatch.context() as mp:
        assert train_cli(mp, *args, *QUIET, "test=false", "trainer.max_steps=2",
                         f"hydra.run.dir={run}") == 0
    art = torch.load(run / "checkpoints" / "last.ckpt", weights_only=False)["attnflow_artifacts"]
    assert art["class_names"] == ["O", "B-LOC", "B-ORG", "B-PER", "I-LOC", "I-ORG", "I-PER"]
    # the JSON-lines form of the same section reads as the same sentences
    from attnflow.data.tagged import read_tagged

    line = re.search(r"```json\n(.*?)\n```", section, re.S).group(1)
    (tmp_path / "a.jsonl").write_text(line + "\n")
    fields = dict(re.findall(r"data\.(tokens_field|tags_field)=(\w+)", section))
    first = read_tagged(tmp_path / "train.conll", "t")[:1]
    assert read_tagged(tmp_path / "a.jsonl", "t", **fields) == first
