"""attnflow-eval: a trained run evaluated on its splits gives the metrics training reported; on
another data set of its kind (another Multi30k-style test file, another JSON-lines file) the
metrics computed by hand, with the training files gone; overrides are checked before any work;
data that does not fit the weights (a GAT on a graph with another feature size) is one message;
nothing written before is overwritten."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
import torch.nn.functional as F

from attnflow.cli.evaluate import main
from attnflow.training.run import train
from cli_runs import (GRAPH, document_files, document_overrides, fabricate_run,
                      parallel_files, translation_overrides, write_jsonl)
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


@pytest.mark.slow
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
        # the run's result: its checkpoint's best/val/… and test/… (attnflow-eval: val/…, test/…)
        logged = {"val": "best/val/", "test": "test/"}[split]
        want = {k.replace(logged, f"{split}/"): v for k, v in reported["metrics"].items() if k.startswith(logged)}
        assert want and got["metrics"].keys() == want.keys()
        for k in want:
            assert got["metrics"][k] == pytest.approx(want[k], abs=1e-6), k
    assert main([str(gat_run)]) == 0  # a second evaluation: a new file, the first one kept
    assert len(_eval_files(gat_run)) == 3
    assert all(p.read_bytes() == b for p, b in before.items())  # nothing of the run rewritten


@pytest.mark.slow
def test_the_other_splits_batch_limit_is_one_warning(gat_run, tmp_path, capsys):
    out = tmp_path / "val.json"
    assert main([str(gat_run), "split=val", "trainer.limit_test_batches=1", "-o", str(out)]) == 0
    assert capsys.readouterr().err.splitlines()[0] == (
        "attnflow: warning: trainer.limit_test_batches is not read: split=val evaluates the val split")
    reported = json.loads((gat_run / "metrics.json").read_text())["metrics"]
    assert json.loads(out.read_text())["metrics"]["val/acc"] == pytest.approx(reported["best/val/acc"], abs=1e-6)


@pytest.mark.slow
def test_a_config_edited_by_hand_or_a_best_checkpoint_outside_the_run_is_one_warning(gat_run, tmp_path,
                                                                                      capsys):
    run = tmp_path / "run"
    shutil.copytree(gat_run, run, ignore=shutil.ignore_patterns("eval"))
    assert main([str(run), "-o", str(tmp_path / "a.json")]) == 0
    assert "warning" not in capsys.readouterr().err
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    (run / "config.yaml").write_text(yaml.safe_dump({**cfg, "model": {**cfg["model"], "heads": 99}}))
    metrics = json.loads((run / "metrics.json").read_text())
    elsewhere = "/elsewhere/checkpoints/epoch9-step99.ckpt"
    (run / "metrics.json").write_text(json.dumps({**metrics, "best_checkpoint": elsewhere}))
    assert main([str(run), "-o", str(tmp_path / "b.json")]) == 0
    assert capsys.readouterr().err.splitlines()[:2] == [
        f"attnflow: warning: {run}/metrics.json names the best checkpoint {elsewhere}, which "
        f"{run}/checkpoints does not hold; the run's own last.ckpt (else its first checkpoint) is used",
        f"attnflow: warning: {run}/config.yaml differs from the checkpoint's config in model (edited "
        f"by hand?): the checkpoint's config is used (data.* and task.* changes: as overrides)"]
    used = Path(json.loads((tmp_path / "b.json").read_text())["checkpoint"])
    assert used.parent == run / "checkpoints" and used.name in ("last.ckpt", "epoch1-step2.ckpt")


@pytest.mark.slow
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
                       (["nonsense"], "is not an override")):
        assert main([str(gat_run), *args]) == 2, args
        assert says in capsys.readouterr().err, args
    taken = tmp_path / "metrics.json"
    taken.write_text("earlier\n")
    assert main([str(gat_run), "-o", str(taken)]) == 2
    assert "not overwritten" in capsys.readouterr().err and taken.read_text() == "earlier\n"
    # a limit of 0 batches: Lightning evaluates nothing, so no metrics
    for args, split in ((["trainer.limit_test_batches=0"], "test"),
                        (["split=val", "trainer.limit_val_batches=0.0"], "val")):
        assert main([str(gat_run), *args]) == 2, args
        assert f"the {split} split gave no metrics" in capsys.readouterr().err, args
    import pytorch_lightning as pl  # a path under a file: mkdir's traceback after the evaluation

    monkeypatch.setattr(pl, "Trainer", lambda *a, **k: pytest.fail("evaluated before refusing"))
    assert main([str(gat_run), "-o", str(taken / "x.json")]) == 2
    assert capsys.readouterr().err == (f"attnflow-eval: -o {taken / 'x.json'}: {taken} is a file, "
                                       f"not a folder; name a file in a folder\n")
    assert main([str(gat_run), "split=val", "split=test"]) == 2
    assert "split is given twice (split=val, split=test): give it once" in capsys.readouterr().err
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


@pytest.mark.slow
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
    from attnflow.inference.documents import load
    from attnflow.inference.documents import predict

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
    assert f"{unseen} line 1: label=5 is not a class of the run's classes (0, 1)" in capsys.readouterr().err


def test_translation_on_another_test_set_without_the_training_files(tmp_path, capsys):
    from sacrebleu.metrics import BLEU

    from attnflow.data.parallel import PAD, collate
    from attnflow.inference.translation import load
    from attnflow.inference.translation import translate

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
    # another direction than the model's
    args = ["data.test=test_b", "data.src_lang=en", "data.tgt_lang=de", "-o", str(tmp_path / "never.json")]
    assert main([str(run), *args]) == 2
    assert ("data.src_lang=en: the run was trained with data.src_lang=de, and its model fits only "
            "that") in capsys.readouterr().err
    assert not (tmp_path / "never.json").exists()
    # a checkpoint copied out of its run: the tokenizers it carries (no <run>/tokenizer/ there)
    alone = tmp_path / "alone" / "mt.ckpt"
    alone.parent.mkdir()
    shutil.copy(run / "checkpoints" / "last.ckpt", alone)
    assert main([str(alone), "data.test=test_b", "-o", str(tmp_path / "alone.json")]) == 0
    assert json.loads((tmp_path / "alone.json").read_text())["metrics"] == got


@pytest.mark.slow
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


def test_a_second_writer_of_the_same_output_is_refused_before_any_work(tmp_path, capsys, monkeypatch):
    """Two `attnflow-eval … -o same.json` at once: the second did all its work, then refused to
    write. Now the first holds .same.json.lock; the second is refused at once, in one line."""
    import os

    import attnflow.cli.evaluate as evaluate_mod
    from attnflow.training.runlock import output_lock_path, writing

    run = fabricate_run(GRAPH, tmp_path / "run")
    out = tmp_path / "same.json"
    with writing(out, "-o first"):  # the first attnflow-eval, still at work
        monkeypatch.setattr(evaluate_mod, "load_run", lambda *a: pytest.fail("the run was read"))
        assert main([str(run), "-o", str(out)]) == 2
        err = capsys.readouterr().err
        assert re.fullmatch(rf"attnflow-eval: -o {re.escape(str(out))} is being written by pid "
                            rf"{os.getpid()} on \S+ since [-\d]+ [:\d]+: give another name, or wait "
                            rf"for that one to end\n", err), err
        monkeypatch.undo()
    assert not out.exists() and not output_lock_path(out).exists()
    assert main([str(run), "-o", str(out)]) == 0  # once it ended: written, no lock file left
    assert "test/acc" in json.loads(out.read_text())["metrics"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run", "same.json"]
