"""Secrets: a value that reaches the config through ``${oc.env:VAR}`` is used by the run but
written only as its interpolation (config.yaml, checkpoints, CSV/TensorBoard hyperparameters, the
W&B offline files, train.log, evaluations); a resume resolves it again; a database URL's password
is masked; W&B online gets the values it needs, with one warning line."""

from __future__ import annotations

import secrets as random_secrets
import warnings
from pathlib import Path

import pytest
import torch
import yaml

from attnflow.cli.evaluate import evaluate
from attnflow.config import secrets
from attnflow.config.registry import AttnflowWarning, ConfigError
from attnflow.training.loggers import logger_inputs
from attnflow.training.resume import resume_config
from attnflow.training.validate import resolve_config
from support import FAST, compose_cfg, train_cli
from test_loggers import wandb_env  # noqa: F401  (a fixture)

SHORT = [*FAST, "trainer.limit_train_batches=2", "trainer.limit_val_batches=1",
         "trainer.limit_test_batches=1", "trainer.log_every_n_steps=1"]
THROUGH = ["logger=[csv,tensorboard,wandb]", "logger.wandb.entity=${oc.env:ATTNFLOW_TEST_SECRET}",
           "logger.wandb.project=p-${oc.env:ATTNFLOW_TEST_SECRET}",
           "tags=[${oc.env:ATTNFLOW_TEST_SECRET},kept]", "run.name=n ${oc.env:ATTNFLOW_TEST_SECRET}"]


@pytest.fixture
def secret(monkeypatch) -> str:
    value = "s3cr" + random_secrets.token_hex(8)
    monkeypatch.setenv("ATTNFLOW_TEST_SECRET", value)
    return value


def _files_holding(root: Path, value: str) -> list:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*")
                  if p.is_file() and not p.is_symlink() and value.encode() in p.read_bytes())


@pytest.mark.slow
def test_a_secret_through_several_keys_is_written_nowhere_and_a_resume_resolves_it(
        wandb_env, secret, tmp_path, monkeypatch, capsys):
    run = tmp_path / "run"
    assert train_cli(monkeypatch, *SHORT, *THROUGH, f"hydra.run.dir={run}") == 0
    err = capsys.readouterr().err
    assert err.count("left out of the offline W&B run") == 1 and secret not in err
    assert (run / "wandb").is_dir() and list((run / "csv" / "version_0").glob("hparams.yaml"))
    assert list((run / "tensorboard" / "version_0").glob("events.*"))
    assert _files_holding(tmp_path, secret) == []
    config = yaml.safe_load((run / "config.yaml").read_text())
    assert config["logger"]["wandb"]["entity"] == "${oc.env:ATTNFLOW_TEST_SECRET}"
    assert config["run"]["name"] == "n ${oc.env:ATTNFLOW_TEST_SECRET}"
    saved = torch.load(run / "checkpoints" / "last.ckpt", weights_only=False)["attnflow_config"]
    assert saved["tags"][0] == "${oc.env:ATTNFLOW_TEST_SECRET}"
    # the resumed run's config resolves it again
    resolved = resolve_config(resume_config(run, {"trainer.max_epochs": 2}))
    assert resolved["logger"]["wandb"]["entity"] == secret
    assert resolved["logger"]["wandb"]["project"] == f"p-{secret}"
    assert train_cli(monkeypatch, f"resume={run}", "trainer.max_epochs=2") == 0
    assert list(run.glob("resume-1.yaml")) and (run / "csv" / "version_1").is_dir()
    evaluate(run)
    assert _files_holding(tmp_path, secret) == []
    saved = torch.load(run / "checkpoints" / "last.ckpt", weights_only=False)
    assert saved["epoch"] == 1 and saved["attnflow_config"]["logger"]["wandb"]["entity"].startswith("${")


@pytest.mark.slow
def test_a_resume_without_the_variable_is_one_config_error(wandb_env, secret, tmp_path, monkeypatch,
                                                           capsys):
    run = tmp_path / "run"
    assert train_cli(monkeypatch, *SHORT, "logger=csv", "run.name=${oc.env:ATTNFLOW_TEST_SECRET}",
                     f"hydra.run.dir={run}") == 0
    monkeypatch.delenv("ATTNFLOW_TEST_SECRET")
    assert train_cli(monkeypatch, f"resume={run}", "trainer.max_epochs=2") == 2
    err = capsys.readouterr().err
    assert "run.name: ${oc.env:ATTNFLOW_TEST_SECRET}" in err and "ATTNFLOW_TEST_SECRET" in err


def test_the_record_keeps_interpolations_and_a_value_built_from_a_variable(secret):
    cfg = compose_cfg(["run.name=x", "tags=[${oc.env:ATTNFLOW_TEST_SECRET}]"])
    found = secrets.find(cfg)
    assert found.keys == {"tags.0": "${oc.env:ATTNFLOW_TEST_SECRET}"}
    assert found.values == {"ATTNFLOW_TEST_SECRET": secret}
    assert "paths.output_root" not in found.keys  # attnflow's own path variable
    kept = secrets.recorded({"tags": [secret], "run": {"name": f"a {secret} b"}, "n": 3}, found)
    assert kept == {"tags": ["${oc.env:ATTNFLOW_TEST_SECRET}"],
                    "run": {"name": "a ${oc.env:ATTNFLOW_TEST_SECRET} b"}, "n": 3}
    assert secrets.resolve_env(kept)["run"]["name"] == f"a {secret} b"


@pytest.mark.parametrize("url, shown", [
    ("postgresql+psycopg2://user:pw@host/db", "postgresql+psycopg2://user:***@host/db"),
    ("postgresql://u:p%40ss@h:5432/db?x=1", "postgresql://u:***@h:5432/db?x=1"),
    ("postgresql://u:${oc.env:PW}@h/db", "postgresql://u:${oc.env:PW}@h/db"),
    ("sqlite:////tmp/optuna.db", "sqlite:////tmp/optuna.db"),
    ("http://host:8080/x", "http://host:8080/x"),
])
def test_a_database_urls_password_is_masked(url, shown):
    assert secrets.mask_url(url) == shown
    assert secrets.recorded({"storage": url}, secrets.Secrets()) == {"storage": shown}


@pytest.mark.parametrize("mode", ["online", "offline"])
def test_wandb_gets_what_it_needs_online_with_one_warning_line(secret, mode):
    cfg = compose_cfg(["logger=wandb", f"logger.wandb.mode={mode}", "run.name=x",
                       "logger.wandb.entity=${oc.env:ATTNFLOW_TEST_SECRET}",
                       "tags=[${oc.env:ATTNFLOW_TEST_SECRET},kept]"])
    resolved = resolve_config(cfg)
    resolved.update(tags=[secret, "kept"])
    kept = secrets.recorded(resolved, secrets.find(cfg))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        logger_cfg, identity = logger_inputs(resolved, kept)
    lines = [str(w.message) for w in caught if issubclass(w.category, AttnflowWarning)]
    assert len(lines) == 1 and "logger.wandb.entity, tags" in lines[0] and secret not in lines[0]
    if mode == "online":
        assert logger_cfg["wandb"]["entity"] == secret and secret in identity["tags"]
    else:
        assert logger_cfg["wandb"]["entity"] is None and identity["tags"] == ["kept"]


def test_no_wandb_no_warning(secret):
    cfg = compose_cfg(["logger=csv", "tags=[${oc.env:ATTNFLOW_TEST_SECRET}]"])
    resolved = resolve_config(cfg)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        logger_cfg, _ = logger_inputs(resolved, secrets.recorded(resolved, secrets.find(cfg)))
    assert "wandb" not in logger_cfg


def test_an_unset_variable_in_a_record_names_its_field(monkeypatch):
    monkeypatch.delenv("ATTNFLOW_TEST_SECRET", raising=False)
    with pytest.raises(ConfigError, match=r"a\.b: \$\{oc\.env:ATTNFLOW_TEST_SECRET\}"):
        secrets.resolve_env({"a": {"b": "${oc.env:ATTNFLOW_TEST_SECRET}"}})



def _record_as_env(run: Path, group: str, key: str, text: str) -> None:
    """Rewrite a run's recorded ``group.key`` as ``text`` (checkpoint, with its digest, and
    config.yaml), as a run that read it from the environment records it."""
    from attnflow.io.checkpoints import read_checkpoint
    from attnflow.io.weights import atomic_torch_save

    ckpt_path = run / "checkpoints" / "last.ckpt"
    ckpt = read_checkpoint(ckpt_path)
    node = ckpt["attnflow_config"][group]
    *path, last = key.split(".")
    for part in path:
        node = node[part]
    node[last] = text
    atomic_torch_save(ckpt, ckpt_path)
    (run / "config.yaml").write_text(yaml.safe_dump(ckpt["attnflow_config"]))


@pytest.mark.slow
def test_predict_and_export_resolve_a_recorded_variable_again(tmp_path, monkeypatch, capsys):
    """A document classifier whose task.optim.lr was recorded as its interpolation: predict
    builds the task with the variable's value (the text is not a float), and without the
    variable predict and export refuse in one line naming the field."""
    from attnflow.cli import export, predict
    from cli_runs import document_files, document_overrides, fabricate_run

    run = fabricate_run(document_overrides(document_files(tmp_path / "docs")), tmp_path / "han")
    _record_as_env(run, "task", "optim.lr", "${oc.decode:${oc.env:ATTNFLOW_TEST_LR}}")
    (tmp_path / "in.txt").write_text("a good film . great acting\nawful plot\n")
    monkeypatch.setenv("ATTNFLOW_TEST_LR", "0.001")
    assert predict.main([str(run), "--file", str(tmp_path / "in.txt"), "-o", str(tmp_path / "out.jsonl")]) == 0
    assert len((tmp_path / "out.jsonl").read_text().splitlines()) == 2
    monkeypatch.delenv("ATTNFLOW_TEST_LR")
    capsys.readouterr()
    for main, args in ((predict.main, [str(run), "--file", str(tmp_path / "in.txt")]),
                       (export.main, [str(run), "--to", "onnx", str(tmp_path / "m.onnx")])):
        assert main(args) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1, err
        assert "task.optim.lr: ${oc.decode:${oc.env:ATTNFLOW_TEST_LR}} as recorded" in err
    assert not (tmp_path / "m.onnx").exists()
