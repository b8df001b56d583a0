"""Loggers: CSV (default), TensorBoard, W&B offline, several at once — config, metrics and
attention maps logged; the logger config's shape and its errors; run names, groups and tags; one
W&B run per training run (and per multirun job), finished even when training fails."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml
from PIL import Image

from attnflow.training.loggers import (build_loggers, log_hyperparams, run_identity, sweep_group,
                                       typed_overrides, validate_loggers)
from attnflow.config.registry import AttnflowWarning, ConfigError
from attnflow.training.validate import resolve_config
from attnflow.training.run import train
from support import FAST, compose_cfg

SHORT = [*FAST, "callbacks.attention_maps.examples=2", "trainer.limit_train_batches=2",
         "trainer.limit_val_batches=1", "trainer.limit_test_batches=1", "trainer.log_every_n_steps=1"]
UNTESTED = [o for o in SHORT if not o.startswith("trainer.limit_test_batches")]  # with test=false


@pytest.mark.slow
def test_csv_logger_writes_metrics_and_config(tmp_path):
    train(compose_cfg(["logger=csv", *SHORT]), tmp_path)
    metrics = (tmp_path / "csv" / "version_0" / "metrics.csv").read_text()
    assert "train/loss" in metrics.splitlines()[0] and "val/seq_acc" in metrics.splitlines()[0]
    hparams = yaml.safe_load((tmp_path / "csv" / "version_0" / "hparams.yaml").read_text())
    assert hparams["model"]["decoder"]["attention"]["scorer"]["name"] == "additive"
    assert sorted(p.name for p in (tmp_path / "attention").iterdir()) == [
        "val_example_0.png", "val_example_1.png"]


@pytest.mark.slow
def test_tensorboard_logger_writes_events_with_images(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    train(compose_cfg(["logger=tensorboard", *SHORT]), tmp_path)
    acc = EventAccumulator(str(tmp_path / "tensorboard" / "version_0"), size_guidance={"images": 0})
    acc.Reload()
    assert "train/loss" in acc.Tags()["scalars"]
    assert sorted(acc.Tags()["images"]) == ["best/val/attention/0", "best/val/attention/1",
                                            "val/attention/0", "val/attention/1"]
    # the two examples have different lengths; their heat maps have one size
    sizes = {(e.width, e.height) for tag in acc.Tags()["images"] for e in acc.Images(tag)}
    assert len(sizes) == 1, sizes


@pytest.fixture
def wandb_env(monkeypatch, tmp_path):
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb_config"))
    monkeypatch.setenv("WANDB_CACHE_DIR", str(tmp_path / "wandb_cache"))
    monkeypatch.delenv("WANDB_API_KEY", raising=False)


def _wandb_run(run_dir: Path) -> Path:
    runs = list((run_dir / "wandb").glob("offline-run-*"))
    assert len(runs) == 1, runs
    return runs[0]


def _wandb_log(run: Path) -> bytes:
    """The offline run's transaction log: config records, history, run name, group, tags."""
    import wandb

    wandb.teardown()  # a finished run's log is written by W&B's service, asynchronously
    return b"".join(p.read_bytes() for p in run.glob("*.wandb"))


def _wandb_records(run: Path):
    """The offline run's W&B ``Record`` protobufs, read from its transaction log: a LevelDB-style
    log (7-byte header, 32 KiB blocks of records: crc, length, type 1 whole / 2 first / 3 middle
    / 4 last); offline there is no wandb-summary.json or config.yaml."""
    import struct

    from wandb.proto.wandb_internal_pb2 import Record

    data = _wandb_log(run)
    pos, part = 7, b""
    while pos + 7 <= len(data):
        if 32768 - pos % 32768 < 7:  # a block's tail too short for a record header: padding
            pos += 32768 - pos % 32768
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        part, pos = part + data[pos + 7:pos + 7 + length], pos + 7 + length
        if kind in (1, 4):
            yield Record.FromString(part)
            part = b""


def _wandb_items(run: Path, field: str) -> dict:
    """The run's final ``summary`` (what W&B's runs table shows) or ``config`` (what it filters
    and groups runs by), from its records."""
    out = {}
    for record in _wandb_records(run):
        for item in getattr(record, field).update if record.HasField(field) else ():
            out["/".join(item.nested_key) or item.key] = json.loads(item.value_json)
    return out


def _wandb_summary(run: Path) -> dict:
    return _wandb_items(run, "summary")


@pytest.mark.slow
def test_csv_and_wandb_at_once_offline_by_default_with_name_tags_images_and_translations(
        tmp_path, wandb_env):
    import wandb

    # several loggers at once; the translation task on the reverse data (heat maps + a table)
    cfg = compose_cfg(["logger=[csv,wandb,tensorboard]", "task=translation", "task.optim.lr=0.002",
                       "tags=[smoke,cpu]", *UNTESTED, "test=false"], return_hydra_config=True)
    train(cfg, tmp_path / "run")
    assert wandb.run is None  # finished
    header = (tmp_path / "run" / "csv" / "version_0" / "metrics.csv").read_text().splitlines()[0]
    assert "train/loss" in header and "val/bleu" in header
    run = _wandb_run(tmp_path / "run")
    log = _wandb_log(run)
    for text in [b"rnn_attention", b"additive", b"val/seq_acc", b"train/loss", b"val/bleu",
                 b"val/attention/0", b"val/attention/1", b"val/translations"]:
        assert text in log, text
    # the run is named from the experiment and the overrides typed; tags: the list + experiment
    assert b"default task=translation task.optim.lr=0.002 data.train_size=256" in log
    for tag in (b"smoke", b"cpu", b"default"):
        assert tag in log, tag
    saved = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    assert saved["run"]["experiment"] == "default" and saved["tags"] == ["smoke", "cpu"]
    assert saved["run"]["overrides"][:2] == ["task=translation", "task.optim.lr=0.002"]
    assert b'"experiment":"default"' in log.replace(b" ", b"")  # the logged config carries it
    # the summary (W&B's runs table) holds metrics.json by the same names: val/… (the last epoch's),
    # best/val/… (the best checkpoint's), which checkpoint
    summary, metrics = _wandb_summary(run), json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert {k: summary[k] for k in metrics["metrics"]} == metrics["metrics"]
    assert summary["best_checkpoint"] == metrics["best_checkpoint"] and summary["epochs"] == 1
    # each picture's caption says what it shows and when: the epoch's validation (2 steps), then
    # the best checkpoint's after training (one epoch: its only checkpoint)
    what = "validation example 0: α of each output word over the source · ".encode()
    assert what + b"epoch 0, step 2" in log
    assert what + b"after training, weights of epoch0-step2.ckpt" in log
    # one image key per example, every image of one size
    images = run / "files" / "media" / "images" / "val" / "attention"
    per_key = {p.name.split("_")[0] for p in images.glob("*.png")}
    assert per_key == {"0", "1"}, per_key
    assert len({Image.open(p).size for p in images.glob("*.png")}) == 1
    # sample translations: a wandb.Table of source / reference / hypothesis
    tables = list((run / "files" / "media" / "table").rglob("translations*.table.json"))
    assert tables
    table = json.loads(tables[0].read_text())
    assert table["columns"] == ["source", "reference", "hypothesis"] and len(table["data"]) == 2
    # reverse data: the reference is the source reversed
    for source, reference, _ in table["data"]:
        assert reference.split() == source.split()[::-1]
    # TensorBoard: the same table as Markdown text
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(tmp_path / "run" / "tensorboard" / "version_0"))
    acc.Reload()
    text = acc.Tensors("val/translations/text_summary")[-1].tensor_proto.string_val[0].decode()
    assert text.startswith("| source | reference | hypothesis |") and table["data"][0][0] in text


@pytest.mark.slow
def test_the_logged_config_is_what_the_run_used_with_every_block_default(tmp_path, wandb_env):
    """Each logger got only what YAML or the command line set (the default run's task was
    {name: seq2seq}: no optimiser, learning rate or batch size); now W&B's config, the CSV
    logger's hparams.yaml and config.yaml hold the config the run used, block defaults filled in."""
    import torch

    from attnflow.config.registry import DATA, MODELS, TASKS

    run_dir = tmp_path / "run"
    train(compose_cfg(["logger=[wandb,csv]", *SHORT], return_hydra_config=True), run_dir)
    config = _wandb_items(_wandb_run(run_dir), "config")
    saved = yaml.safe_load((run_dir / "config.yaml").read_text())
    hparams = yaml.safe_load((run_dir / "csv" / "version_0" / "hparams.yaml").read_text())
    for section in ("data", "model", "task", "trainer"):
        assert config[section] == saved[section] == hparams[section], section
    # no YAML file sets these: the constructors' defaults, as the registry lists them
    task_defaults = {f: d for f, _, d in TASKS.fields("seq2seq")}
    assert {f"optim.{k}": v for k, v in config["task"]["optim"].items()} == {
        f: d for f, d in task_defaults.items() if f.startswith("optim.")}
    assert config["task"]["optim"]["optimizer"] in ("adam", "adamw", "sgd") and config["task"]["optim"]["lr"] > 0
    assert config["data"]["batch_size"] == 32 and config["data"]["max_len"] == dict(
        (f, d) for f, _, d in DATA.fields("reverse"))["max_len"]
    # the sizes logged are the model's: built from them, it has the parameters the run counted
    model_cfg = config["model"]
    assert {"embed_dim", "encoder", "decoder"} <= set(model_cfg) and model_cfg["encoder"]["hidden_dim"] == 64
    context = DATA.build(config["data"]).model_context()
    with torch.device("meta"):
        built = MODELS.build(model_cfg, **context)
    parameters = json.loads((run_dir / "metrics.json").read_text())["parameters"]
    assert sum(p.numel() for p in built.parameters()) == parameters


def _wandb_history(run: Path) -> list:
    """The offline run's history rows (what W&B's charts draw), from its records."""
    return [{"/".join(i.nested_key) or i.key: json.loads(i.value_json) for i in record.history.item}
            for record in _wandb_records(run) if record.HasField("history")]


@pytest.mark.slow
def test_one_name_one_number_in_metrics_json_wandb_tensorboard_the_report_and_train_log(tmp_path, wandb_env):
    """metrics.json and attnflow-report gave the best checkpoint's val/loss where W&B's summary
    gave the last epoch's; train.log counted epochs from 1, checkpoint names and captions from 0.
    Now val/x is the curve (a single value of it: the last epoch's), best/val/x the best
    checkpoint's, and epochs count from 0. The checkpoint keeps the epoch of the highest val/loss
    (mode=max): the best and the last epoch differ."""
    import csv
    import re

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from attnflow.viz.runs import build, table

    run_dir = tmp_path / "run"
    train(compose_cfg(["logger=[wandb,csv,tensorboard]", *SHORT, "trainer.max_epochs=3",
                       "callbacks.checkpoint.monitor=val/loss", "callbacks.checkpoint.mode=max"],
                      return_hydra_config=True), run_dir)
    m = json.loads((run_dir / "metrics.json").read_text())
    metrics, run = m["metrics"], _wandb_run(run_dir)
    val = {row["epoch"]: row["val/loss"] for row in _wandb_history(run) if "val/loss" in row}
    assert list(val) == [0, 1, 2] and m["epochs"] == 3  # (epochs: a count)
    epoch, step = map(int, re.fullmatch(r"epoch(\d+)-step(\d+)\.ckpt", Path(m["best_checkpoint"]).name).groups())
    assert epoch == max(val, key=val.get) != 2
    # one name, one number: metrics.json, the W&B summary and TensorBoard
    summary = _wandb_summary(run)
    acc = EventAccumulator(str(run_dir / "tensorboard" / "version_0"))
    acc.Reload()
    assert metrics["val/loss"] == pytest.approx(summary["val/loss"]) == pytest.approx(val[2])
    assert metrics["best/val/loss"] == pytest.approx(summary["best/val/loss"]) == pytest.approx(val[epoch])
    for name in ("val/loss", "best/val/loss", "test/loss"):
        assert acc.Scalars(name)[-1].value == pytest.approx(metrics[name], rel=1e-6), name
    with open(run_dir / "csv" / "version_0" / "metrics.csv") as f:
        lr = [r for r in csv.DictReader(f) if r.get("lr")]  # (one parameter group: one curve, named lr)
    assert len(lr) == m["global_step"]  # one per step (log_every_n_steps=1)
    # the report's table: the same names and numbers, ranked by the result
    report = build(run_dir)
    header, (row,) = table(report, full=True)
    assert report.metric == "best/val/loss" and header.index("best/val/loss") < header.index("val/loss")
    assert {k: v for k, v in zip(header, row) if k in metrics} == metrics
    # epochs, 0-based: train.log's lines, the checkpoint's name and the pictures' captions agree
    log = (run_dir / "train.log").read_text()
    lines = dict(re.findall(r"\] epoch (\d)/2 done in \S+: .*val/loss=(\S+)", log))
    assert lines == {str(e): f"{v:.4g}" for e, v in val.items()}
    assert f" · epoch {epoch}, step {step}".encode() in _wandb_log(run)
    # the final table (train.log's, as the console's): the best checkpoint's validation and test
    final = next(r for r in log[log.index("final metrics (best checkpoint)"):].splitlines() if r.startswith("│ loss "))
    assert [c.strip() for c in final.split("│")[2:4]] == [f"{metrics[k]:.4g}" for k in ("best/val/loss", "test/loss")]


@pytest.mark.slow
def test_no_pictures_with_zero_examples(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    train(compose_cfg(["logger=tensorboard", *SHORT, "callbacks.attention_maps.examples=0",
                       "test=false"]), tmp_path)
    acc = EventAccumulator(str(tmp_path / "tensorboard" / "version_0"), size_guidance={"images": 0})
    acc.Reload()
    assert "val/loss" in acc.Tags()["scalars"] and acc.Tags()["images"] == []
    assert not (tmp_path / "attention").exists()


def test_wandb_run_is_finished_when_training_fails(tmp_path, wandb_env, monkeypatch):
    import wandb

    from attnflow.tasks.seq2seq import Seq2SeqTask

    def boom(self, batch, batch_idx):
        raise RuntimeError("boom in training_step")

    monkeypatch.setattr(Seq2SeqTask, "training_step", boom)
    with pytest.raises(RuntimeError, match="boom"):
        train(compose_cfg(["logger=wandb", *SHORT]), tmp_path / "run")
    assert wandb.run is None
    assert not (tmp_path / "run" / "metrics.json").exists()
    assert len(list((tmp_path / "run" / "wandb").glob("offline-run-*"))) == 1


# -- the logger config: a mapping from logger name to fields ----------------------------------------
def test_logger_choices_compose_to_a_mapping_of_loggers(tmp_path):
    def loggers(*overrides):
        return resolve_config(compose_cfg([*overrides, *FAST]))["logger"]

    assert loggers() == {"csv": {}}
    assert loggers("logger=none") == {}
    assert build_loggers(loggers("logger=none"), tmp_path) == []
    both = loggers("logger=[csv,wandb]", "logger.wandb.project=p", "logger.wandb.run_id=abc")
    assert list(both) == ["csv", "wandb"]
    assert both["wandb"]["project"] == "p" and both["wandb"]["run_id"] == "abc"
    assert validate_loggers(both)["wandb"]["mode"] is None  # constructor defaults filled in
    built = build_loggers({"tensorboard": {}, "csv": {}}, tmp_path)
    assert [type(lg).__name__ for lg in built] == ["TensorBoardLogger", "CSVLogger"]


@pytest.mark.parametrize("override, message", [
    ("logger.wandb.projetc=x", r"field 'projetc' \(at 'logger.wandb.projetc'\).*"
                               r"Did you mean 'project'"),
    ("logger.tensorbord.project=x", r"unknown logger 'tensorbord' at 'logger.tensorbord.name'.*Registered "
                              r"loggers: csv, none, tensorboard, wandb.*Did you mean 'tensorboard'"),
    ("logger.wandb.name=x", r"'logger.wandb' must be a mapping.*run.name"),
    ("logger.csv=3", r"'logger.csv' must be a mapping"),
])
def test_bad_logger_configs_are_refused_naming_the_path(override, message):
    with pytest.raises(ConfigError, match=message):
        resolve_config(compose_cfg([override]))


@pytest.mark.parametrize("fields, env, message", [
    ({"project": "team/proj"}, {}, r"Invalid project name 'team/proj'"),
    ({}, {"WANDB_PROJECT": "team/proj"}, r"Invalid project name 'team/proj'"),
    ({"tags": ["ok", "x" * 65]}, {}, r"is 65 characters"),
    ({"mode": "sometimes"}, {}, r"mode\n.*'offline'"),
    ({}, {"WANDB_MODE": "sometimes"}, r"mode\n.*'offline'"),
    ({"run_id": "a:b"}, {}, r"Run ID cannot contain"),
])
def test_what_w_and_b_refuses_as_its_run_starts_is_a_config_error(tmp_path, wandb_env, monkeypatch,
                                                                   fields, env, message):
    """W&B checks its settings (fields or its own variables) in wandb.init, when attnflow logs the
    config: its refusal comes as a ConfigError with W&B's message, and no run is left open."""
    import wandb

    for key, value in env.items():
        monkeypatch.setenv(key, value)
    loggers = build_loggers({"wandb": fields}, tmp_path, {"name": "x"})
    with pytest.raises(ConfigError, match=r"(?s)W&B refused to start the run.*" + message):
        log_hyperparams(loggers, {"a": 1})
    assert wandb.run is None


def test_wandb_mode_from_the_environment_reaches_w_and_b(monkeypatch, tmp_path):
    """$WANDB_MODE is used where logger.wandb.mode is null, with W&B's own names (dryrun)."""
    monkeypatch.setenv("WANDB_MODE", "dryrun")
    cfg = resolve_config(compose_cfg(["logger=wandb"]))
    (logger,) = build_loggers(cfg["logger"], tmp_path, {"name": "x"})
    assert logger._wandb_init["mode"] == "dryrun"  # given to wandb.init (no run started here)
    (logger,) = build_loggers({"wandb": {"mode": "disabled"}}, tmp_path, {"name": "x"})
    assert logger._wandb_init["mode"] == "disabled"  # the field outranks the variable


# -- run identity -----------------------------------------------------------------------------------
@pytest.mark.slow
def test_run_name_from_experiment_and_typed_overrides():
    cfg = compose_cfg(["experiment=gat_cora", "scorer=dot", "task.optim.lr=0.01", "logger=csv",
                       "hydra.run.dir=/x", "paths.data_dir=/d", "tags=[a,b]"],  # (Cora's data is under it)
                      return_hydra_config=True)
    ident = run_identity(cfg, resolve_config(cfg))
    assert ident["run"] == {"experiment": "gat_cora", "name": "gat_cora scorer=dot task.optim.lr=0.01",
                            "group": None, "overrides": ["scorer=dot", "task.optim.lr=0.01"]}
    assert ident["tags"] == ["a", "b"]
    # an Optuna trial's values rounded in the name (4 significant digits), kept whole in overrides
    cfg = compose_cfg(["experiment=gat_cora", "task.optim.lr=0.042447295225632876", "model.dropout=0.5",
                       "model.heads=8", "paths.data_dir=/d"], return_hydra_config=True)
    ident = run_identity(cfg, resolve_config(cfg))["run"]
    assert ident["name"] == "gat_cora task.optim.lr=0.04245 model.dropout=0.5 model.heads=8"
    assert ident["overrides"][0] == "task.optim.lr=0.042447295225632876"
    assert typed_overrides(["++model.heads=2", "hydra/launcher=joblib", "logger.wandb.project=p",
                            "~callbacks.early_stopping", "callbacks.progress_bar=none"]) == [
        "model.heads=2", "~callbacks.early_stopping"]
    # set explicitly (or kept from a saved config): kept
    cfg = compose_cfg(["run.name=mine", "run.experiment=exp"], return_hydra_config=True)
    assert run_identity(cfg, resolve_config(cfg))["run"]["name"] == "mine"
    cfg = compose_cfg(["run.experiment=exp", "scorer=dot"], return_hydra_config=True)
    assert run_identity(cfg, resolve_config(cfg))["run"]["name"] == "exp scorer=dot"
    # outside Hydra: the experiment is unknown; the name says what is trained
    plain = compose_cfg([])
    assert run_identity(plain, resolve_config(plain))["run"] == {
        "experiment": None, "name": "seq2seq on reverse", "group": None, "overrides": None}
    with pytest.raises(ConfigError, match=r"run has no field 'nam' \(at 'run.nam'\).*Did you mean 'name'"):
        run_identity(plain, {**resolve_config(plain), "run": {"nam": "x"}})
    with pytest.raises(ConfigError, match=r"tags \(at 'tags'\) must be a list"):
        run_identity(plain, {**resolve_config(plain), "tags": "a"})


@pytest.mark.slow
def test_wandbs_own_variables_name_group_and_tag_the_run_where_nothing_else_does(monkeypatch):
    """$WANDB_NAME, $WANDB_RUN_GROUP and $WANDB_TAGS (W&B's variables) count where no field sets
    them, with a W&B logger only, and config.yaml records what W&B is given."""
    monkeypatch.setenv("WANDB_NAME", "from-env")
    monkeypatch.setenv("WANDB_RUN_GROUP", "env-group")
    monkeypatch.setenv("WANDB_TAGS", "t1, t2,,")  # W&B's form: comma-separated

    def identity(*overrides):
        cfg = compose_cfg(["scorer=dot", *overrides], return_hydra_config=True)
        return run_identity(cfg, resolve_config(cfg))

    ident = identity("logger=wandb", "tags=[a]")
    assert (ident["run"]["name"], ident["run"]["group"], ident["tags"]) == ("from-env", "env-group",
                                                                             ["a", "t1", "t2"])
    ident = identity("logger=wandb", "logger.wandb.run_name=n1", "run.group=g1")  # a field wins
    assert (ident["run"]["name"], ident["run"]["group"]) == ("n1", "g1")
    ident = identity("logger=csv")  # no W&B run: W&B's variables name nothing
    assert (ident["run"]["name"], ident["run"]["group"], ident["tags"]) == ("default scorer=dot", None, [])


def test_multirun_jobs_share_a_group_named_after_the_sweep():
    cfg = compose_cfg(["scorer=dot"], return_hydra_config=True)
    cfg.hydra.mode = "MULTIRUN"
    cfg.hydra.sweep.dir = "outputs/multirun/2025-01-31/12-00-00-000001"
    ident = run_identity(cfg, resolve_config(cfg))
    assert ident["run"]["group"] == "default 2025-01-31/12-00-00-000001"
    assert ident["run"]["name"] == "default scorer=dot"
    # a fixed sweep folder named like the search (a continued Optuna study): one group
    assert sweep_group("gat_cora_optuna", "outputs/multirun/gat_cora_optuna") == "gat_cora_optuna"


def test_the_wandb_group_and_name_are_the_runs_own():
    cfg = compose_cfg(["logger=wandb", "logger.wandb.group=g1", "logger.wandb.run_name=n1"],
                      return_hydra_config=True)
    run = run_identity(cfg, resolve_config(cfg))["run"]
    assert (run["group"], run["name"]) == ("g1", "n1")  # what config.yaml records is what W&B used
    cfg = compose_cfg(["logger=wandb", "logger.wandb.group=g1", "run.group=g2"], return_hydra_config=True)
    with pytest.warns(AttnflowWarning, match=r"run.group=g2 is unread: logger.wandb.group=g1 names it"):
        assert run_identity(cfg, resolve_config(cfg))["run"]["group"] == "g1"


def test_long_wandb_names_stay_apart_when_cut(tmp_path, wandb_env):
    """W&B names are cut to 128 characters; sweep jobs whose swept value comes last keep distinct
    names (a digest of the whole name ends the cut one)."""
    from attnflow.training.loggers import wandb_logger

    long = "mt_transformer " + " ".join(f"task.optim.option_{i}=value_{i}" for i in range(6))
    names = {wandb_logger(str(tmp_path / s), {"name": f"{long} scorer={s}"})._wandb_init["name"]
             for s in ("dot", "general")}
    assert len(names) == 2 and all(len(n) == 128 and n.startswith(long[:100]) for n in names)


def test_wandb_runs_have_the_train_job_type_and_no_anonymous_warning(tmp_path, wandb_env, monkeypatch):
    """W&B's runs table groups by job type: an attnflow run is a ``train`` job, unless
    $WANDB_JOB_TYPE (W&B's own variable) names another. wandb.init is not given the
    ``anonymous`` setting W&B warns about on every run."""
    from attnflow.training.loggers import wandb_logger

    monkeypatch.delenv("WANDB_JOB_TYPE", raising=False)
    init = wandb_logger(str(tmp_path), {"name": "x"})._wandb_init  # what wandb.init is given
    assert init["job_type"] == "train"
    # nor Lightning's anonymous=None, which W&B answers with a warning about a setting not set
    assert "anonymous" not in init
    monkeypatch.setenv("WANDB_JOB_TYPE", "ablation")
    assert wandb_logger(str(tmp_path), {"name": "x"})._wandb_init["job_type"] == "ablation"


def test_wandb_project_is_wandb_projects_unless_the_field_sets_one(tmp_path, wandb_env, monkeypatch):
    """$WANDB_PROJECT (W&B's own variable) names the project where logger.wandb.project is null;
    the field outranks it."""
    def project(*overrides):
        cfg = resolve_config(compose_cfg(["logger=wandb", *overrides]))
        (logger,) = build_loggers(cfg["logger"], tmp_path, {"name": "x"})
        return logger._wandb_init["project"]  # given to wandb.init (no run started here)

    monkeypatch.delenv("WANDB_PROJECT", raising=False)
    assert project() == "attnflow"
    monkeypatch.setenv("WANDB_PROJECT", "mine")
    assert project() == "mine" and project("logger.wandb.project=p") == "p"


def test_wandbs_files_go_to_wandb_dir_where_it_is_set_else_the_run_folder(tmp_path, wandb_env, monkeypatch):
    cfg = resolve_config(compose_cfg(["logger=wandb"]))
    monkeypatch.delenv("WANDB_DIR", raising=False)
    assert build_loggers(cfg["logger"], tmp_path / "run", {})[0].save_dir == str(tmp_path / "run")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "w"))
    (logger,) = build_loggers(cfg["logger"], tmp_path / "run", {})
    assert logger.save_dir == str(tmp_path / "w") and logger._wandb_init["name"] == "run"


def test_a_sweep_over_experiments_is_one_group(tmp_path):
    """``-m experiment=a,b``: each job has its own experiment, the sweep one group (read from the
    sweep's multirun.yaml, which Hydra writes before the first job)."""
    sweep = tmp_path / "sw"
    sweep.mkdir()
    (sweep / "multirun.yaml").write_text(
        "hydra:\n  overrides:\n    task:\n    - experiment=reverse_multihead,reverse_bahdanau\n    - seed=1\n")
    groups = set()
    for experiment in ("reverse_multihead", "reverse_bahdanau"):
        cfg = compose_cfg([f"experiment={experiment}"], return_hydra_config=True)
        cfg.hydra.mode = "MULTIRUN"
        cfg.hydra.sweep.dir = str(sweep)
        ident = run_identity(cfg, resolve_config(cfg))
        assert ident["run"]["experiment"] == experiment
        groups.add(ident["run"]["group"])
    assert groups == {f"reverse_multihead,reverse_bahdanau {tmp_path.name}/sw"}


@pytest.mark.slow
def test_a_multirun_makes_one_named_wandb_run_per_job_in_one_group(tmp_path, wandb_env, monkeypatch):
    from attnflow.cli.train import main

    sweep = tmp_path / "sweep"
    # attnflow-train -m, in this process (Hydra's basic launcher runs the jobs one after another)
    monkeypatch.setattr(sys, "argv", [
        "attnflow-train", "-m", "logger=wandb", "scorer=dot,general", *FAST,
        "trainer.limit_train_batches=1", "trainer.limit_val_batches=1", "test=false",
        "callbacks.attention_maps.examples=1", "trainer.enable_model_summary=false",
        f"hydra.sweep.dir={sweep}", "hydra/job_logging=none", "hydra/hydra_logging=none"])
    try:
        main()
    finally:  # later tests run outside Hydra, whatever happened
        from hydra.core.global_hydra import GlobalHydra
        from hydra.core.hydra_config import HydraConfig

        HydraConfig.instance().cfg = None
        GlobalHydra.instance().clear()
    logs = [_wandb_log(_wandb_run(sweep / str(job))) for job in (0, 1)]
    group = f"default {sweep.parent.name}/sweep".encode()
    assert all(group in log for log in logs)
    assert b"default scorer=dot data.train_size=256" in logs[0]
    assert b"default scorer=general data.train_size=256" in logs[1]
    for job in (0, 1):  # the job's config.yaml carries the same identity
        saved = yaml.safe_load((sweep / str(job) / "config.yaml").read_text())
        assert saved["run"]["group"] == group.decode()
