"""Multi-task learning (task ``multitask``, data ``multitask``, ``model.head=multitask``): the loss
is Σ_t λ_t L_t of the tasks' cross-entropies computed by hand, λ_t = 0 leaves a head without
gradient, each task's metrics are logged under its name, one tokenizer serves every task, a run
is evaluated and resumed like others, and bad configs are refused before any work naming the
field. Generated reviews (a polarity and a rating per text), so no data set is needed."""

from __future__ import annotations

import csv
import functools
import json
import logging
import random
import warnings

import pytest
import torch
import torch.nn.functional as F

from attnflow.config.registry import DATA, MODELS, TASKS, ConfigError
from attnflow.training.run import build_callbacks, train
from attnflow.training.validate import resolve_config
from support import compose_cfg

POSITIVE = "good great wonderful brilliant moving superb".split()
NEGATIVE = "bad awful boring dull stupid poor".split()
FILLER = "the film was a and it story acting plot cast music scene".split()
RATINGS = [1, 2, 3, 4, 7, 8, 9, 10]
TINY = ["model.d_model=32", "model.layers=1", "model.ffn_dim=64", "attention.heads=2",
        "trainer.accelerator=cpu", "callbacks.progress_bar=none", "logger=csv"]


def reviews(n: int, seed: int):
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        pos = rng.random() < 0.5
        words = [rng.choice(FILLER) for _ in range(rng.randint(5, 12))]
        words += [rng.choice(POSITIVE if pos else NEGATIVE) for _ in range(rng.randint(1, 3))]
        rng.shuffle(words)
        rows.append({"text": " ".join(words) + ".", "label": int(pos),
                     "rating": rng.choice(RATINGS[4:] if pos else RATINGS[:4])})
    return rows


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("reviews")
    out = []
    for split, n, seed in (("train", 64, 0), ("dev", 24, 1)):
        rows = reviews(n, seed)
        rows[0]["rating"], rows[1]["rating"] = 1, 10  # every rating value in training: 8 classes
        rows[2:10] = [{**r, "rating": v} for r, v in zip(rows[2:10], RATINGS)]
        (root / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        out.append(root / f"{split}.jsonl")
    return tuple(out)


@functools.lru_cache(maxsize=None)
def _composed(overrides):
    return compose_cfg(["experiment=bert_imdb_multitask", *overrides])


def config(files, *overrides):
    train_path, dev_path = files
    return resolve_config(_composed((f"data.common.train_path={train_path}",
                                     f"data.common.val_path={dev_path}", "data.common.test_path=",
                                     "data.common.vocab_size=60", "data.common.batch_size=8",
                                     *TINY, *overrides)))


def build(cfg):
    """Data module, model and task as attnflow-train builds them (no trainer)."""
    dm = DATA.build(cfg["data"], path="data")
    model = MODELS.build(cfg["model"], path="model", **dm.model_context())
    task = TASKS.build(cfg["task"], model, path="task", **dm.task_context())
    dm.setup()
    return dm, model, task


def head_logits(model, task, b):
    """Task ``task``'s logits written out: its linear layer on tanh(W_s z₀ + b_s) (eval: no
    dropout), z₀ the encoder's ⟨CLS⟩ vector."""
    hidden = model(b["input_ids"], b["segment_ids"], b["attention_mask"])
    return model.task_heads[task](torch.tanh(model.pooler(hidden[:, 0])))


def quiet_step(task, batch, split="train"):
    with warnings.catch_warnings():  # self.log without a trainer
        warnings.simplefilter("ignore")
        return task.step(batch, split)


@pytest.mark.parametrize("weights", [(1.0, 1.0), (0.3, 2.0)])
def test_loss_is_the_weighted_sum_of_each_tasks_cross_entropy_by_hand(files, weights):
    cfg = config(files, f"task.tasks.polarity.weight={weights[0]}",
                 f"task.tasks.rating.weight={weights[1]}")
    dm, model, task = build(cfg)
    # one head per task, sized by its data's classes: polarity 2, rating 8 (1–4, 7–10)
    assert {t: h.out_features for t, h in model.task_heads.items()} == {"polarity": 2, "rating": 8}
    batch = next(iter(dm.train_dataloader()))  # one batch of every task
    assert list(batch) == ["polarity", "rating"]
    assert int(batch["polarity"]["labels"].max()) <= 1 < int(batch["rating"]["labels"].max())
    task.eval()
    loss = quiet_step(task, batch)
    with torch.no_grad():
        ce = {t: F.cross_entropy(head_logits(model, t, batch[t]), batch[t]["labels"]) for t in batch}
    hand = weights[0] * ce["polarity"] + weights[1] * ce["rating"]
    assert float(loss.detach()) == pytest.approx(float(hand), rel=1e-5)
    assert float(ce["polarity"]) != pytest.approx(float(ce["rating"]), rel=1e-3)  # the λ are told apart
    # each task's labels are its field of the same reviews: the rating task's are the 8 ratings
    assert sorted(set(dm.parts["rating"].splits["train"].labels)) == list(range(8))
    assert sorted(set(dm.parts["polarity"].splits["train"].labels)) == [0, 1]


def test_a_zero_weight_leaves_its_head_without_gradient(files):
    dm, model, task = build(config(files, "task.tasks.rating.weight=0"))
    batch = next(iter(dm.train_dataloader()))
    task.eval()  # no dropout: the two backward passes see the same function
    quiet_step(task, batch).backward()
    got = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    assert all(not g.any() for n, g in got.items() if n.startswith("task_heads.rating."))
    assert got["task_heads.polarity.weight"].abs().sum() > 0
    # the encoder's gradient is that of the polarity loss alone, by hand
    model.zero_grad(set_to_none=True)
    b = batch["polarity"]
    F.cross_entropy(head_logits(model, "polarity", b), b["labels"]).backward()
    for n, p in model.named_parameters():
        if not n.startswith("task_heads.rating."):
            assert torch.allclose(got[n], p.grad, atol=1e-7), n


@pytest.mark.slow
def test_a_run_logs_each_tasks_metrics_under_its_name_and_is_evaluated(files, tmp_path, monkeypatch, capsys):
    """A 3-step run: train/{task}/…, val/{task}/… and {split}/loss = Σ λ_t L_t; one tokenizer
    trained for both tasks; attnflow-eval reproduces the final metrics; attnflow-predict labels."""
    import attnflow.data.corpus as text_data
    from attnflow.cli.evaluate import evaluate

    trained = []
    original = text_data.train_wordpiece
    monkeypatch.setattr(text_data, "train_wordpiece", lambda *a, **k: trained.append(1) or original(*a, **k))
    run = tmp_path / "run"
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        summary = train(config(files, "task.tasks.rating.weight=0.5", "trainer.limit_train_batches=3",
                               "trainer.max_epochs=1", "trainer.log_every_n_steps=1",
                               "callbacks.checkpoint.monitor=val/rating/acc"), run)
    finally:
        torch.set_num_threads(threads)
    assert len(trained) == 1  # the first task's data trains it, the other reuses it
    m = summary["metrics"]
    assert m["val/loss"] == pytest.approx(m["val/polarity/loss"] + 0.5 * m["val/rating/loss"], rel=1e-5)
    with open(run / "csv" / "version_0" / "metrics.csv") as f:
        columns = set(next(csv.reader(f)))
    per_task = {f"{s}/{t}/{k}" for s in ("train", "val") for t in ("polarity", "rating")
                for k in ("loss", "acc")} | {f"val/{t}/f1" for t in ("polarity", "rating")}
    assert per_task | {"train/loss", "val/loss"} <= columns
    assert not [c for c in columns if "dataloader_idx" in c]
    # the checkpoints and the tokenizer are the run's; evaluation gives the same numbers
    assert (run / "tokenizer" / "wordpiece.json").is_file()
    evaluated, path = evaluate(run)
    assert path.is_file() and evaluated["split"] == "val"
    for k in ("val/loss", "val/polarity/acc", "val/rating/acc", "val/rating/f1"):
        assert evaluated["metrics"][k] == pytest.approx(m[f"best/{k}"], rel=1e-5), k  # the checkpoint's
    # attnflow-predict labels the trained run: a label and probability per task
    from attnflow.cli.predict import main as predict_main

    assert predict_main([str(run), "a good film"]) == 0
    header, line = capsys.readouterr().out.splitlines()[-2:]
    assert header.startswith("polarity\tpolarity_probability\trating\t") and line.endswith("a good film")
    # its labels.json names each task's classes in the files' order; predict reads names edited there
    labels = json.loads((run / "labels.json").read_text())
    assert labels == {"polarity": ["0", "1"], "rating": [str(r) for r in RATINGS]}
    (run / "labels.json").write_text(json.dumps({**labels, "polarity": ["neg", "pos"]}))
    assert predict_main([str(run), "a good film"]) == 0
    assert capsys.readouterr().out.splitlines()[-1].split("\t")[0] in ("neg", "pos")


@pytest.mark.slow
def test_a_run_stopped_mid_epoch_resumes_to_the_uninterrupted_result(files, tmp_path):
    """max_steps within the first epoch, then resume=… into the second: the same metrics as one
    run, exactly (the cycling loader resumes at its next batch; the run's tokenizer is read back).
    The tokenizer comes from a saved one: HF's WordPiece training may break ties differently from
    one call to the next (huggingface/tokenizers#1794)."""
    from attnflow.data.corpus import train_wordpiece

    tok_run = tmp_path / "tok"
    (tok_run / "tokenizer").mkdir(parents=True)
    texts = [json.loads(line)["text"] for line in files[0].read_text().splitlines()]
    train_wordpiece(texts, 60).save(str(tok_run / "tokenizer" / "wordpiece.json"))
    args = (f"data.common.tokenizer_from={tok_run}", "data.common.vocab_size=null",
            "data.common.batch_size=16", "task.optim.scheduler=none", "task.optim.lr=1e-3",
            "trainer.max_epochs=2", "trainer.limit_val_batches=1", "logger=none",
            "trainer.enable_model_summary=false", "callbacks.attention_maps.examples=0")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        whole = train(_composed_raw(files, (*args, "trainer.max_steps=6")), tmp_path / "whole")
        cut = train(_composed_raw(files, (*args, "trainer.max_steps=2")), tmp_path / "cut")
        assert cut["global_step"] == 2  # 4 batches an epoch (64 texts of each task, 16 a batch)
        resumed = train(_composed_raw(files, (*args, "trainer.max_steps=6",
                                              f"resume={tmp_path / 'cut'}")), tmp_path / "cut")
    finally:
        torch.set_num_threads(threads)
    assert resumed["global_step"] == whole["global_step"] == 6
    assert resumed["metrics"] == whole["metrics"]


@pytest.mark.slow
def test_the_dashboard_shows_the_first_tasks_texts_as_words(files):
    """Each task sees the trainer's data module (Lightning attaches the trainer to direct
    children only), so the table shows the reviews' words, not token ids."""
    from types import SimpleNamespace

    dm, model, task = build(config(files))
    task._trainer = SimpleNamespace(datamodule=dm)  # what Lightning attaches before setup
    task.setup("fit")
    panels = task.dashboard(dm.example_batch(2))
    assert [p["key"] for p in panels] == ["val/polarity/attention/0", "val/polarity/attention/1",
                                          "val/polarity/predictions"]
    words = set(POSITIVE + NEGATIVE + FILLER)
    for row in panels[-1]["rows"]:
        assert row[0] and set(row[0].replace(".", " ").split()) <= words, row[0]


@pytest.mark.slow
def test_init_from_loads_the_encoder_and_the_heads_are_new(files, tmp_path, caplog):
    from attnflow.data.corpus import train_wordpiece
    from attnflow.tasks.bert_pretraining import BertPretrainingTask

    texts = [json.loads(line)["text"] for line in files[0].read_text().splitlines()]
    tok = train_wordpiece(texts, 60)
    pre = tmp_path / "pre"
    (pre / "tokenizer").mkdir(parents=True)
    tok.save(str(pre / "tokenizer" / "wordpiece.json"))
    cfg = config(files, f"model.init_from={pre}", "data.common.vocab_size=null")
    pre_model = MODELS.build({**cfg["model"], "head": "pretraining", "init_from": None},
                             vocab_size=tok.get_vocab_size(), pad_id=0)
    pre_task = BertPretrainingTask(pre_model, 4, [str(i) for i in range(tok.get_vocab_size())])
    (pre / "checkpoints").mkdir()
    torch.save({"state_dict": pre_task.state_dict(),
                "attnflow_config": {"data": {"name": "bert_pretraining"}, "task": {"name": "bert_pretraining"},
                                    "model": {**cfg["model"], "head": "pretraining", "init_from": None}}},
               pre / "checkpoints" / "last.ckpt")
    with caplog.at_level(logging.INFO, logger="attnflow.models.bert"):
        dm, model, task = build(cfg)
    assert dm.parts["rating"].tokenizer.get_vocab() == tok.get_vocab()  # the pretraining run's
    ours, theirs = model.state_dict(), pre_model.state_dict()
    assert all(torch.equal(ours[k], theirs[k]) for k in ours if not k.startswith("task_heads."))
    report = " ".join(r.getMessage() for r in caplog.records)
    assert "new: task_heads.polarity.weight, task_heads.polarity.bias, task_heads.rating.weight" in report
    frozen = build(config(files, f"model.init_from={pre}", "data.common.vocab_size=null",
                          "model.freeze_encoder=true"))[1]
    assert {n for n, p in frozen.named_parameters() if p.requires_grad} == {
        f"task_heads.{t}.{w}" for t in ("polarity", "rating") for w in ("weight", "bias")}


def test_monitor_metric_names_depend_on_the_tasks(files, tmp_path):
    from pytorch_lightning.callbacks import ModelCheckpoint

    from attnflow.sweep.checks import check_optimized_metric

    cfg = config(files, "callbacks.checkpoint.monitor=val/rating/acc")
    task = build(cfg)[2]
    ck = [c for c in build_callbacks(cfg["callbacks"], tmp_path, task) if isinstance(c, ModelCheckpoint)]
    assert (ck[0].monitor, ck[0].mode) == ("val/rating/acc", "max")
    from attnflow.training.run import task_monitor  # from the config, before the task is built
    ck = [c for c in build_callbacks(cfg["callbacks"], tmp_path, task_monitor(cfg["task"]))
          if isinstance(c, ModelCheckpoint)]
    assert (ck[0].monitor, ck[0].mode) == ("val/rating/acc", "max")
    ck = [c for c in build_callbacks(config(files)["callbacks"], tmp_path, task) if isinstance(c, ModelCheckpoint)]
    assert (ck[0].monitor, ck[0].mode) == ("val/loss", "min")  # the default: Σ λ_t L_t
    assert check_optimized_metric({**cfg, "optimized_metric": "val/polarity/f1"}) == "val/polarity/f1"
    with pytest.raises(ConfigError, match=r"'val/polarity/f2'.*val/polarity/f1"):
        check_optimized_metric({**cfg, "optimized_metric": "val/polarity/f2"})


def test_the_imdb_experiment_resolves_to_its_two_tasks_as_listed_before():
    """experiment=bert_imdb_multitask no longer lists task.tasks: its data's tasks complete it
    to what the preset listed, in the same order: polarity then rating, text_classification
    tasks of weight 1, with the labels the data preset gives."""
    cfg = resolve_config(compose_cfg(["experiment=bert_imdb_multitask"]))
    listed = {"weight": 1.0, "task": {"name": "text_classification"}}
    assert list(cfg["task"]["tasks"].items()) == [("polarity", listed), ("rating", listed)]
    assert list(cfg["data"]["tasks"].items()) == [("polarity", {"label_field": "label", "labels": [0, 1]}),
                                                  ("rating", {"label_field": "rating", "labels": RATINGS})]
    kept = resolve_config(compose_cfg(["experiment=bert_imdb_multitask", "task.tasks.rating.weight=0.5",
                                       "task.tasks.rating.task.label_smoothing=0.1"]))["task"]["tasks"]
    assert kept == {"polarity": listed, "rating": {"weight": 0.5, "task": {"name": "text_classification",
                                                                          "label_smoothing": 0.1}}}


@pytest.mark.parametrize("overrides, message", [
    (["task.tasks.rating.task.lrr=1"],
     r"no block has a field 'lrr' \(at 'task.tasks.rating.task.lrr'\)"),
    (["task.tasks.rating.weight=-0.5"], r"'task.tasks.rating.weight'\) must be a finite number >= 0, got -0.5"),
    (["task.tasks.rating.weight=0", "task.tasks.polarity.weight=0"], r"every weight .* is 0"),
    (["task.tasks.rating.wieght=1"], r"no block has a field 'wieght' \(at 'task.tasks.rating.wieght'\)"),
    (["callbacks.checkpoint.monitor=val/ratng/acc"],
     r"monitor 'val/ratng/acc' is not a metric .*val/rating/acc.*Did you mean 'val/rating/acc'"),
    (["data.tasks.rating.lable_field=rating"], r"field 'lable_field' \(at 'data.tasks.rating.lable_field'\).*Did you mean 'label_field'"),
    (["task.tasks.extra.weight=1"], r"data.tasks lacks extra; task.tasks lacks -"),
    (["data=multitask"], r"data.tasks names no task: .*data.tasks.sentiment.label_field=sentiment"),
    (["model.head=sequence"], r"do not fit together"),
    (["task.tasks.rating.task={name: classification}"],
     r"task.tasks.rating: task 'classification' works on documents, but its data .* gives text_classification"),
    (["task.tasks.rating.task={name: bert_pretraining}", "data.tasks.rating.name=bert_pretraining",
      "~data.tasks.rating.label_field", "~data.tasks.rating.labels"],
     r"task.tasks.rating: task 'bert_pretraining' .* needs a 'pretraining' head; model 'bert' builds per task only sequence"),
])
def test_bad_configs_are_refused_before_any_work(files, tmp_path, overrides, message):
    with pytest.raises(ConfigError, match=message):
        train(_composed_raw(files, overrides), tmp_path / "run")
    assert not (tmp_path / "run").exists()  # nothing made or written


def _composed_raw(files, overrides):
    """The composed (unresolved) config: train() resolves and validates it itself."""
    train_path, dev_path = files
    return _composed((f"data.common.train_path={train_path}", f"data.common.val_path={dev_path}",
                      "data.common.test_path=", "data.common.vocab_size=60", *TINY, *overrides))


@pytest.mark.parametrize("others_updated", [False, True])
def test_split_loss_sync_is_joined_by_a_rank_without_that_tasks_batches(files, others_updated,
                                                                         monkeypatch):
    """Under DDP each task's mean loss compute() all-gathers: a rank whose (unrepeated) shard of a
    task's validation loader was empty must still compute it when another rank saw batches, or
    the other ranks wait for it forever; λ_t·mean_t then enters val/loss on every rank alike."""
    from types import SimpleNamespace

    _, _, task = build(config(files))
    names = list(task.subtasks)
    asked, logged = [], {}

    def reduce(decision, all=True):  # the other ranks' decisions, OR-ed with this one's
        asked.append((decision, all))
        return decision or others_updated

    task._trainer = SimpleNamespace(strategy=SimpleNamespace(reduce_boolean_decision=reduce))
    monkeypatch.setattr(task, "log", lambda key, value, **kw: logged.__setitem__(key, float(value)))
    means = task._split_loss["val"]
    means[names[0]].update(torch.tensor(2.0), weight=3)  # this rank saw only the first task
    computed = []
    for t, m in means.items():  # (the all-gather itself needs a process group: the local value)
        monkeypatch.setattr(m, "compute", lambda t=t, m=m: computed.append(t) or
                            torch.tensor(2.0 if m.update_count else 0.0))
    task._log_split_loss("val")
    assert sorted(asked) == sorted([(True, False), (False, False)])
    assert computed == (names if others_updated else names[:1])
    expected = task.weights[names[0]] * 2.0
    assert logged == {"val/loss": pytest.approx(expected)}
    assert all(m.update_count == 0 for m in means.values())  # reset for the next epoch
