"""attnflow-eval: a trained run evaluated on its splits gives the metrics training reported; on
another data set of its kind (another Multi30k-style test file, another JSON-lines file) the
metrics computed by hand, with the training files gone; overrides are checked before any work;
data that does not fit the weights (a GAT on a graph with another feature size) is one message;
nothing written before is overwritten."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from attnflow.cli.evaluate import main
from attnflow.training.run import train
from cli_runs import (GRAPH, document_files, document_overrides, fabricate_run,
                      one_torch_thread, parallel_files, translation_overrides, write_jsonl)
# one_torch_thread: an autouse fixture, in effect by being imported
from support import DATA_DIR, compose_cfg


@pytest.fixture(scope="module")
def gat_run(tmp_path_factory):
    """A GAT trained for 2 epochs on a generated graph (attnflow.training.run.train: a real run directory)."""
    run = tmp_path_factory.mktemp("gat_run")
    train(compose_cfg([*GRAPH, "trainer.max_epochs=2", "trainer.enable_model_summary=false"]), run)
    return run


def _eval_files(run):
    return sorted((run / "eval").glob("*.json"))


def test_a_run_evaluates_to_the_metrics_training_reported(gat_run, capsys):
    reported = json.loads((gat_run / "metrics.json").read_text())
    ckpt = gat_run / "checkpoints" / next(p.name for p in (gat_run / "checkpoints").glob("epoch*"))
    before = {p: p.read_bytes() for p in (ckpt, gat_run / "metrics.json")}
    assert main([str(gat_run)]) == 0  # the test split by default
    assert "test/acc" in capsys.readouterr().out  # printed as a table
    assert main([str(gat_run), "split=val"]) == 0
    files = _eval_files(gat_run)
    assert [p.name.split("-")[0] for p in files] == ["test", "val"]
    for f in files:
        got = json.loads(f.read_text())
        assert got["checkpoint"] == reported["best_checkpoint"]
        split = got["split"]
        want = {k: v for k, v in reported["metrics"].items() if k.startswith(f"{split}/")}
        assert want and got["metrics"].keys() == want.keys()
        for k in want:
            assert got["metrics"][k] == pytest.approx(want[k], abs=1e-6), k
    assert main([str(gat_run)]) == 0  # a second evaluation: a new file, the first one kept
    assert len(_eval_files(gat_run)) == 3
    assert all(p.read_bytes() == b for p, b in before.items())  # nothing of the run rewritten


def test_overrides_are_checked_before_any_work(gat_run, tmp_path, capsys, monkeypatch):
    n = len(_eval_files(gat_run))
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)  # whatever this machine has
    for args, says in ((["foo=1"], "has no override 'foo'"),
                       (["data.num_nodez=10"], "data 'synthetic_graph' has no field 'num_nodez'"),
                       (["split=train"], "split must be 'val' or 'test'"),
                       (["seed=abc"], "seed must be an integer, got 'abc'"),
                       (["trainer.max_epochs=3"], "has no override 'trainer.max_epochs'"),
                       (["trainer.devices=abc"], "config error: trainer: `devices` selected with"),
                       (["trainer.accelerator=gpu"], "config error: trainer: "),  # Lightning's refusal
                       (["data.name=parallel"], "works on graphs"),
                       (["nonsense"], "is not an override"),
                       # accepted and recorded in the result before, with the metrics unchanged
                       (["data.batch_size=4"], "data.batch_size does nothing in attnflow-eval: with "
                                               "data.loader=full the whole graph is one batch"),
                       (["trainer.limit_val_batches=1"], "trainer.limit_val_batches does nothing in "
                        "attnflow-eval: split=test evaluates the test split; it is read with split=val"),
                       (["split=val", "trainer.limit_test_batches=1"], "split=val evaluates the val split"),
                       (["task.optim={lr: 0.1}"], "task.optim does nothing in attnflow-eval: task "
                                                  "'node_classification' reads it in training only"),
                       # the root seed only seeds seed_everything; the data reads data.seed
                       (["seed=5"], "seed=5 does nothing in attnflow-eval: the root seed reaches only "
                                    "Lightning's seed_everything, and evaluating data "
                                    "'synthetic_graph' draws nothing from it; the data reads "
                                    "data.seed (here ")):
        assert main([str(gat_run), *args]) == 2, args
        assert says in capsys.readouterr().err, args
    assert main([str(gat_run), "seed=5"]) == 2
    assert capsys.readouterr().err.endswith("give data.seed=5 instead\n")
    from attnflow.data.graph import GraphDataModule  # neighbour sampling draws at evaluation too

    assert [GraphDataModule.evaluation_draws({"loader": x}) for x in ("full", "khop", "neighbor")] == [
        False, False, True]
    taken = tmp_path / "metrics.json"
    taken.write_text("earlier\n")
    assert main([str(gat_run), "-o", str(taken)]) == 2
    assert "not overwritten" in capsys.readouterr().err and taken.read_text() == "earlier\n"
    import pytorch_lightning as pl  # a path under a file: mkdir's traceback after the evaluation

    monkeypatch.setattr(pl, "Trainer", lambda *a, **k: pytest.fail("evaluated before refusing"))
    assert main([str(gat_run), "-o", str(taken / "x.json")]) == 2
    assert capsys.readouterr().err == (f"attnflow-eval: -o {taken / 'x.json'}: {taken} is a file, "
                                       f"not a folder; name a file in a folder\n")
    # a key given twice: the last was used, both recorded; a limit of 0 batches evaluated, then said
    # "the test split gave no metrics (is it empty?)"
    for args, says in ((["split=val", "split=test"], "split is given twice (split=val, split=test): "
                                                     "give it once"),
                       (["trainer.limit_test_batches=0"], "trainer.limit_test_batches=0 evaluates no "
                                                          "batch of the test split"),
                       (["split=val", "trainer.limit_val_batches=0.0"],
                        "trainer.limit_val_batches=0.0 evaluates no batch of the val split")):
        assert main([str(gat_run), *args]) == 2, args
        assert says in capsys.readouterr().err, args
    assert len(_eval_files(gat_run)) == n  # nothing written by a refused evaluation
    # without -o: <run>/eval a file was mkdir's traceback after the evaluation, the metrics lost
    copy = tmp_path / "copy"
    shutil.copytree(gat_run, copy, ignore=shutil.ignore_patterns("eval"))
    (copy / "eval").write_text("notes\n")
    assert main([str(copy), "split=val"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"attnflow-eval: without -o the metrics go to {copy / 'eval' / 'val-'}")
    assert err.endswith(f".json: {copy / 'eval'} is a file, not a folder; move that file away, or "
                        f"name the output with -o FILE\n") and err.count("\n") == 1
    assert (copy / "eval").read_text() == "notes\n"


def test_a_graph_with_another_feature_size_is_a_clear_error(gat_run, capsys):
    ckpt = torch.load(next((gat_run / "checkpoints").glob("*.ckpt")), weights_only=True)
    shape = tuple(ckpt["state_dict"]["model.layers.0.lin.weight"].shape)  # (heads · F′, features)
    assert main([str(gat_run), "data.feature_dim=8"]) == 2
    err = capsys.readouterr().err
    assert f"model.layers.0.lin.weight is {shape} in the checkpoint but ({shape[0]}, 8) here" in err
    assert "in_dim=8" in err and "Traceback" not in err
    if (DATA_DIR / "planetoid" / "Cora" / "raw").is_dir():  # a real Planetoid graph: 1433 features
        assert main([str(gat_run), "data.name=planetoid", "data.dataset=Cora",
                     f"data.root={DATA_DIR / 'planetoid'}"]) == 2
        err = capsys.readouterr().err
        assert f"({shape[0]}, 1433) here" in err and "planetoid" in err
    assert main([str(gat_run), "data.name=planetoid", "data.dataset=CiteSeer",
                 "data.root=/nonexistent/planetoid"]) == 2
    assert "CiteSeer is missing from /nonexistent/planetoid/CiteSeer/raw" in capsys.readouterr().err


def test_documents_on_another_file_without_the_training_file(tmp_path, capsys):
    from attnflow.cli.predict import load, predict

    docs = document_files(tmp_path / "docs")
    run = fabricate_run(document_overrides(docs), tmp_path / "han")
    (docs / "train.jsonl").unlink()  # only vocab.json is needed
    rows = [json.loads(line) for line in (docs / "other.jsonl").read_text().splitlines()]
    assert main([str(run), f"data.test_path={docs / 'other.jsonl'}"]) == 0
    got = json.loads(_eval_files(run)[0].read_text())
    assert got["split"] == "test" and _eval_files(run)[0].name.startswith("test-")
    # by hand: the run's classifier on the same texts (one batch: the epoch mean is the batch's)
    task, art = load(run)
    res = predict(task, art, [r["text"] for r in rows], batch_size=64)
    p = np.array([[r["probabilities"][c] for c in ("0", "1")] for r in res])
    y = np.array([r["label"] for r in rows])
    assert got["metrics"]["test/acc"] == pytest.approx(float((p.argmax(1) == y).mean()), abs=1e-6)
    assert got["metrics"]["test/loss"] == pytest.approx(float(-np.log(p[np.arange(len(y)), y]).mean()),
                                                        rel=1e-4)
    assert main([str(run)]) == 0  # the run has no test split (test=false): its validation file
    assert json.loads(_eval_files(run)[-1].read_text())["split"] == "val"
    unseen = write_jsonl(tmp_path / "unseen.jsonl", [{"text": "A good film.", "label": 5}])
    assert main([str(run), f"data.test_path={unseen}"]) == 2
    assert "label=5, not seen in training" in capsys.readouterr().err
    # the fields that shape only the training data and vocabulary: accepted and recorded before,
    # with the metrics unchanged (the run's vocab.json is loaded, the split read whole)
    n = len(_eval_files(run))
    for field in ("min_freq=1000", "max_vocab=10", "lowercase=false", "limit_val=1", "bucket=false",
                  f"train_path={docs / 'other.jsonl'}"):
        assert main([str(run), f"data.{field}"]) == 2, field
        assert capsys.readouterr().err == (f"attnflow-eval: config error: data.{field.split('=')[0]} "
                                           f"does nothing in attnflow-eval: data 'documents' reads "
                                           f"it in training only. Drop the override\n")
    assert len(_eval_files(run)) == n
    # the renderings: written at a validation epoch's end into the run directory in training; here
    # into attnflow-eval's scratch folder, deleted with it (accepted and recorded before)
    assert main([str(run), "split=val", "task.renderings=2"]) == 2
    assert capsys.readouterr().err == ("attnflow-eval: config error: task.renderings does nothing in "
                                       "attnflow-eval: task 'classification' reads it in training only. "
                                       "Drop the override\n")
    # the validation file, with the test split evaluated: only the evaluated split's file is read
    assert main([str(run), f"data.test_path={docs / 'other.jsonl'}", "data.val_path=elsewhere.jsonl"]) == 2
    assert capsys.readouterr().err == ("attnflow-eval: config error: data.val_path does nothing in "
                                       "attnflow-eval: split=test evaluates the test split; it is read "
                                       "with split=val. Drop the override\n")
    assert len(_eval_files(run)) == n


@pytest.mark.parametrize("data, task, field", [
    ({"name": "documents", "train_path": "t", "val_path": "v", "test_path": "s"}, "classification", "val_path"),
    ({"name": "text_classification", "train_path": "t", "val_path": "v", "test_path": "s"},
     "text_classification", "val_path"),
    ({"name": "captions", "root": "r"}, "captioning", "val_split"),
    ({"name": "captions", "root": "r", "val_captions": "v", "test_captions": "s"}, "captioning", "val_captions"),
    ({"name": "shapes"}, "captioning", "val_size"),  # each split draws from seeds of its own
])
def test_a_validation_only_data_field_is_refused_where_the_test_split_is_evaluated(data, task, field):
    """Each of these modules' setup_evaluation reads the evaluated split's file (draws its
    examples) only: the validation split's field was accepted with split=test and changed nothing."""
    from attnflow.cli.evaluate import _refuse_unread
    from attnflow.config.registry import ConfigError, DATA

    data = DATA.validate(data, "data")
    cfg = {"task": {"name": task}, "data": data}
    _refuse_unread([f"data.{field}"], cfg, "val", data)
    with pytest.raises(ConfigError, match=rf"^data.{field} does nothing in attnflow-eval: split=test "
                                          rf"evaluates the test split; it is read with split=val"):
        _refuse_unread([f"data.{field}"], cfg, "test", data)


def test_what_evaluation_leaves_to_training_is_what_it_does_not_read(tmp_path):
    """The claim behind refusing data.min_freq, max_vocab, lowercase, limit_val and bucket in
    attnflow-eval: two document modules that differ in all of them, set up for evaluation from
    the same run's vocabulary, give the same split in the same batches."""
    from attnflow.data.documents import DocumentDataModule

    docs = document_files(tmp_path / "docs")
    trained = DocumentDataModule(train_path=str(docs / "train.jsonl"), val_path=str(docs / "dev.jsonl"),
                                 min_freq=1, batch_size=4)
    trained.setup()
    art = trained.artifacts()
    assert DocumentDataModule.training_only == ("train_path", "min_freq", "max_vocab", "lowercase",
                                                "limit_train", "limit_val", "bucket", "word_vectors")
    batches = []
    for fields in ({}, {"min_freq": 50, "max_vocab": 8, "lowercase": False, "limit_val": 2,
                        "bucket": False, "train_path": str(docs / "other.jsonl")}):
        dm = DocumentDataModule(**{"train_path": str(docs / "train.jsonl"),
                                   "val_path": str(docs / "dev.jsonl"), "batch_size": 4, **fields})
        dm.setup_evaluation(tmp_path, art, "val")
        batches.append(list(dm.val_dataloader()))
    assert len(batches[0]) == len(batches[1]) == 5  # the 20 dev documents, 4 a batch, none cut
    for a, b in zip(*batches):
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    # BERT's classification data likewise loads the run's tokenizer: its tokenizer fields too
    from attnflow.cli.evaluate import _refuse_unread
    from attnflow.config.registry import ConfigError, DATA

    data = DATA.validate({"name": "text_classification", "train_path": "t", "val_path": "v"}, "data")
    cfg = {"task": {"name": "text_classification"}, "data": data}
    for field in ("vocab_size", "lowercase", "tokenizer_from", "limit_val"):
        with pytest.raises(ConfigError, match=rf"^data.{field} does nothing in attnflow-eval: data "
                                              rf"'text_classification' reads it in training only"):
            _refuse_unread([f"data.{field}"], cfg, "val", data)
    _refuse_unread(["data.max_len", "data.batch_size"], cfg, "val", data)  # read by evaluation


def test_what_bert_pretraining_evaluation_leaves_to_training_is_what_it_does_not_read(tmp_path):
    """The claim behind refusing data.vocab_size, lowercase, limit_train and train_path in
    attnflow-eval of a BERT pretraining run (and limit_val, val_path with split=test): two modules
    that differ in all of them, set up for evaluation from the same run's tokenizer, give the same
    masked batches (the masking draws random ids below the tokenizer's vocabulary size, not
    data.vocab_size). max_len, which cuts the instances, is read."""
    from attnflow.data.pretraining import PretrainingDataModule
    from attnflow.cli.evaluate import _refuse_unread
    from attnflow.config.registry import ConfigError, DATA

    rng = np.random.default_rng(0)
    for name, docs in (("train.txt", 30), ("dev.txt", 12), ("other.txt", 5)):  # a document a line
        (tmp_path / name).write_text("".join(" ".join(
            " ".join(["Word", *(f"w{i}" for i in rng.integers(0, 40, rng.integers(3, 9)))]) + "."
            for _ in range(rng.integers(2, 6))) + "\n" for _ in range(docs)))
    files = {"train_path": str(tmp_path / "train.txt"), "val_path": str(tmp_path / "dev.txt")}
    trained = PretrainingDataModule(**files, vocab_size=60, max_len=24, batch_size=4)
    art = trained.artifacts()
    batches = []
    for fields in ({}, {"vocab_size": 1000, "lowercase": False, "limit_train": 2,
                        "train_path": str(tmp_path / "other.txt")}):
        dm = PretrainingDataModule(**{**files, "vocab_size": 60, "max_len": 24, "batch_size": 4, **fields})
        dm.setup_evaluation(tmp_path, art, "val")
        batches.append(list(dm.val_dataloader()))
    assert len(batches[0]) == len(batches[1]) > 1
    for a, b in zip(*batches):
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    data = DATA.validate({"name": "bert_pretraining", **files}, "data")
    cfg = {"task": {"name": "bert_pretraining"}, "data": data}
    for field in ("vocab_size", "lowercase", "limit_train", "train_path"):
        with pytest.raises(ConfigError, match=rf"^data.{field} does nothing in attnflow-eval: data "
                                              rf"'bert_pretraining' reads it in training only"):
            _refuse_unread([f"data.{field}"], cfg, "val", data)
    with pytest.raises(ConfigError, match=r"^data.limit_val does nothing in attnflow-eval: split=test"):
        _refuse_unread(["data.limit_val"], cfg, "test", data)
    _refuse_unread(["data.max_len", "data.mlm_prob", "data.limit_val", "data.val_path"], cfg, "val", data)


def test_shapes_evaluation_draws_no_training_image_so_train_size_is_refused(tmp_path):
    """A shapes run evaluated loads its vocabulary and draws only the evaluated split, from seeds
    of its own: data.train_size changed nothing there (accepted and recorded before)."""
    from attnflow.data.captioning import ShapesDataModule
    from attnflow.cli.evaluate import _refuse_unread
    from attnflow.config.registry import ConfigError, DATA

    trained = ShapesDataModule(train_size=8, val_size=4, test_size=4, size=48)
    trained.setup()
    art = {"itos": trained.vocab.itos, "input": trained.input_kind}
    splits = []
    for train_size in (8, 3):
        dm = ShapesDataModule(train_size=train_size, val_size=4, test_size=4, size=48)
        dm.setup_evaluation(tmp_path, art, "test")
        splits.append([dm.dataset("test")[i][1] for i in range(4)])  # (index, example)
    for a, b in zip(*splits):
        assert a.words == b.words and torch.equal(a.image, b.image)
    data = DATA.validate({"name": "shapes"}, "data")
    cfg = {"task": {"name": "captioning"}, "data": data}
    with pytest.raises(ConfigError, match=r"^data.train_size does nothing in attnflow-eval: data "
                                          r"'shapes' reads it in training only"):
        _refuse_unread(["data.train_size"], cfg, "test", data)
    _refuse_unread(["data.test_size", "data.size", "data.batch_size"], cfg, "test", data)  # read


def test_translation_on_another_test_set_without_the_training_files(tmp_path, capsys):
    from sacrebleu.metrics import BLEU

    from attnflow.data.parallel import PAD, collate
    from attnflow.cli.translate import load, translate

    data = parallel_files(tmp_path / "data")
    run = fabricate_run(translation_overrides(data), tmp_path / "mt")
    for f in data.glob("train.*"):
        f.unlink()  # only <run>/tokenizer/ is needed
    assert main([str(run), "data.test=test_b"]) == 0
    got = json.loads(_eval_files(run)[0].read_text())["metrics"]
    src = (data / "test_b.de").read_text().splitlines()
    ref = (data / "test_b.en").read_text().splitlines()
    model, dm, _ = load(run)
    hyps, _ = translate(model, dm, src)  # greedy: the run's task.beam_size is 1
    assert got["test/bleu"] == pytest.approx(BLEU().corpus_score(hyps, [ref]).score, abs=1e-6)
    batch = collate([(i, dm.src_tok.encode(s).ids[:dm.max_src_len], dm.tgt_tok.encode(t).ids)
                     for i, (s, t) in enumerate(zip(src, ref))])
    with torch.no_grad():
        logits, _ = model(batch["src"], batch["src_lengths"], batch["tgt_in"])
    loss = F.cross_entropy(logits.transpose(1, 2), batch["tgt_out"], ignore_index=PAD,
                           label_smoothing=0.1)  # the translation task's default smoothing
    assert got["test/loss"] == pytest.approx(float(loss), rel=1e-4)
    assert main([str(run), "data.test=test_missing"]) == 2
    assert "test_missing.de" in capsys.readouterr().err
    assert main([str(run), "data.test=test_b", "task.tgt_word_dropout=0.3"]) == 2
    assert "task.tgt_word_dropout does nothing in attnflow-eval: task 'translation' reads it in " \
           "training only" in capsys.readouterr().err
    # a field of the other split: test decoding's beam with split=val, and the reverse; the test
    # set's name with split=val (the validation split is evaluated: they were recorded, unread)
    for args, says in [(["split=val", "task.beam_size=5"], "task.beam_size does nothing in "
                        "attnflow-eval: split=val evaluates the val split; it is read with split=test"),
                       (["split=test", "data.test=test_b", "task.val_beam_size=5"],
                        "task.val_beam_size does nothing in attnflow-eval: split=test evaluates the "
                        "test split; it is read with split=val"),
                       (["split=val", "data.test=test_b"], "data.test does nothing in attnflow-eval: "
                        "split=val evaluates the val split; it is read with split=test"),
                       (["data.test=test_b", "data.val=nowhere"], "data.val does nothing in "
                        "attnflow-eval: split=test evaluates the test split; it is read with split=val"),
                       # the tokenizers' settings (the run's own are loaded), and another direction
                       (["data.test=test_b", "data.vocab_size=7"], "data.vocab_size does nothing in "
                        "attnflow-eval: data 'parallel' reads it in training only"),
                       (["data.test=test_b", "data.train=nowhere"], "data.train does nothing"),
                       (["data.test=test_b", "data.src_lang=en", "data.tgt_lang=de"],
                        "data.src_lang=en: the run was trained with data.src_lang=de, and its model "
                        "fits only that")]:
        assert main([str(run), *args, "-o", str(tmp_path / "never.json")]) == 2
        assert says in capsys.readouterr().err
        assert not (tmp_path / "never.json").exists()
    # a checkpoint copied out of its run: the tokenizers it carries (no <run>/tokenizer/ there)
    alone = tmp_path / "alone" / "mt.ckpt"
    alone.parent.mkdir()
    shutil.copy(run / "checkpoints" / "last.ckpt", alone)
    assert main([str(alone), "data.test=test_b", "-o", str(tmp_path / "alone.json")]) == 0
    assert json.loads((tmp_path / "alone.json").read_text())["metrics"] == got


def test_unreadable_checkpoints_and_foreign_runs(gat_run, tmp_path, capsys):
    assert main([str(tmp_path / "nowhere")]) == 2
    assert "no such run directory or checkpoint" in capsys.readouterr().err
    ckpt = next((gat_run / "checkpoints").glob("*.ckpt"))
    cut = tmp_path / "cut.ckpt"
    cut.write_bytes(ckpt.read_bytes()[:1000])
    assert main([str(cut)]) == 2
    assert "corrupt or truncated" in capsys.readouterr().err
    foreign = tmp_path / "foreign.ckpt"
    torch.save({"state_dict": {"w": torch.ones(1)}}, foreign)
    assert main([str(foreign)]) == 2
    assert "is not an attnflow run" in capsys.readouterr().err
