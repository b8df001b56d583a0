"""Bad names and bad fields fail before training with one clear message, not a traceback."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest
import torch

from attnflow.config.registry import ConfigError
from attnflow.training.run import train
from support import FAST, ROOT, compose_cfg, train_cli

# The runs that train: two batches of the reversal, one of validation and test, nothing recorded.
TINY = ["data.train_size=64", "data.val_size=16", "data.test_size=16", "data.batch_size=32",
        "trainer.accelerator=cpu", "trainer.max_epochs=1", "trainer.enable_model_summary=false",
        "callbacks.progress_bar=none", "callbacks.attention_maps.examples=0", "logger=none"]


@pytest.mark.parametrize("overrides, expected", [
    (["scorer.name=dott"], ["unknown scorer 'dott' at 'scorer.name'", "scaled_dot", "Did you mean 'dot'?"]),
    (["model.encoder.name=transformer"], ["unknown encoder 'transformer' at 'model.encoder.name'", "rnn"]),
    (["+scorer.hiden_dim=3"], ["scorer 'additive' has no field 'hiden_dim'", "'scorer.hiden_dim'", "hidden_dim"]),
    (["scorer.hidden_dim=wide"], ["field 'hidden_dim'", "must be int", "'wide'"]),
    (["model.encoder.cell=transformer"], ["'model.encoder.cell'", "'gru', 'lstm', 'rnn'"]),
    (["+trainer.max_epoch=3"], ["trainer has no field 'max_epoch'", "Did you mean 'max_epochs'?"]),
    (["model.name=seq3seq"], ["unknown model 'seq3seq'", "seq2seq"]),
    (["trainer.max_epochs=abc"], ["trainer.max_epochs (at 'trainer.max_epochs') must be int or null, got 'abc'"]),
    (["+trainer.benchmark=maybe"], ["trainer.benchmark (at 'trainer.benchmark') must be bool or null"]),
    (["trainer.max_epochs=99999999999999999999999"], ["trainer.max_epochs=99999999999999999999999 is beyond "
                                                      "a 64-bit integer"]),
    (["data.train_size=-9223372036854775809"], ["data.train_size=-9223372036854775809 is beyond"]),
    # Lightning's own refusals, when the run builds its Trainer (before the run folder and the data)
    (["trainer.precision=bf17"], ["trainer: Precision 'bf17' is invalid", "'bf16-mixed'"]),
    (["trainer.strategy=ddpp"], ["trainer: You selected an invalid strategy name: `strategy='ddpp'`"]),
    (["trainer.devices=[0]"], ["trainer: `devices` selected with `CPUAccelerator` should be an int > 0"]),
    (["+trainer.max_time=1h"], ["trainer: `Timer(duration='1h')` is not a valid duration"]),
    (["+trainer.plugins=[]"], ["trainer has no field 'plugins'", "set by attnflow"]),
    (["+trainer.barebones=true"], ["trainer has no field 'barebones'", "barebones forbids"]),
    (["callbacks.lr_monitor=yes"], ["callbacks.lr_monitor must be one of null, true, false", "'yes'"]),
    (["seed=-1"], ["seed must be an int in [0, 2^32 - 1]", "got -1"]),
    (["test=maybe"], ["test must be one of true, false", "'maybe'"]),
    (["resume=5"], ["resume must be a string or null, got 5"]),
    (["+paths.data_dri=/x"], ["paths has no field 'data_dri' (at 'paths.data_dri')", "Did you mean 'data_dir'?"]),
    (["float32_matmul_precision=fast"], ["float32_matmul_precision must be one of null, highest, high, medium", "'fast'"]),
])
def test_bad_config_fails_before_any_work(overrides, expected, tmp_path):
    cfg = compose_cfg([*FAST, *overrides])
    with pytest.raises(ConfigError) as err:
        train(cfg, tmp_path / "run")
    for text in expected:
        assert text in str(err.value)
    assert not (tmp_path / "run").exists()  # nothing was built or written


@pytest.mark.parametrize("overrides, idle", [
    (["callbacks.lr_monitor=true", "logger=none"], ["callbacks.lr_monitor"]),
    (["callbacks.early_stopping={}", "trainer.limit_val_batches=0"], ["callbacks.early_stopping"]),
    (["callbacks.early_stopping={}", "trainer.max_epochs=2", "trainer.check_val_every_n_epoch=3"],
     ["trainer.check_val_every_n_epoch", "callbacks.early_stopping"]),
    (["callbacks.average={best: 2}", "trainer.limit_val_batches=0.0"], ["callbacks.average"]),
    (["callbacks.early_stopping={}", "trainer.max_epochs=2", "trainer.min_epochs=5"], ["trainer.min_epochs"]),
    (["trainer.limit_test_batches=0"], ["test"]),
    (["callbacks.ema={start_step: 50}", "trainer.max_steps=20"], ["callbacks.ema"]),
    # what they need: a logger, a training metric without validation, validation in the last epoch
    (["callbacks.lr_monitor=true", "logger=csv"], []),
    (["callbacks.early_stopping={monitor: train/loss}", "trainer.limit_val_batches=0"], []),
    (["callbacks.early_stopping={}", "trainer.max_epochs=3", "trainer.check_val_every_n_epoch=3"], []),
    (["trainer.check_val_every_n_epoch=2", "trainer.fast_dev_run=true"], []),
    (["trainer.fast_dev_run=true", "trainer.limit_test_batches=0"], []),
])
def test_a_setting_the_config_leaves_unread_is_named(overrides, idle):
    from attnflow.config.registry import TASKS
    from attnflow.training.trainer_checks import idle_settings
    from attnflow.training.validate import resolve_config

    resolved = resolve_config(compose_cfg([*FAST, *overrides]))
    assert list(idle_settings(resolved, TASKS.get(resolved["task"]["name"]))) == idle


def test_an_unread_callback_is_one_warning_and_not_built(tmp_path):
    from pytorch_lightning.callbacks import LearningRateMonitor

    from attnflow.config.registry import AttnflowWarning
    from attnflow.training.run import build_trainer
    from attnflow.training.validate import resolve_config

    resolved = resolve_config(compose_cfg([*FAST, "callbacks.lr_monitor=true", "logger=none"]))
    with pytest.warns(AttnflowWarning, match="callbacks.lr_monitor is unread: logger=none") as seen:
        trainer = build_trainer(resolved, tmp_path / "run")
    assert len([w for w in seen if issubclass(w.category, AttnflowWarning)]) == 1
    assert not [c for c in trainer.callbacks if isinstance(c, LearningRateMonitor)]
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_bert_inputs_longer_than_its_positions_are_refused_before_any_work(tmp_path):
    """The model refused them only at the first batch that long, after the data was tokenised;
    a multitask run's tasks each have their own data.max_len (or the common one)."""
    with pytest.raises(ConfigError, match="data.max_len=600 gives inputs longer than model.max_len=512"):
        train(compose_cfg(["experiment=bert_imdb", "data.max_len=600"]), tmp_path / "run")
    assert not (tmp_path / "run").exists()
    for typed, named in (("data.tasks.rating.max_len=9999", "data.tasks.rating.max_len=9999"),
                         ("data.common.max_len=600", "data.tasks.polarity.max_len=600")):
        with pytest.raises(ConfigError, match=rf"{named} gives inputs longer than model.max_len=512"
                                              rf".*lower {named.split('=')[0]}"):
            train(compose_cfg(["experiment=bert_imdb_multitask", typed]), tmp_path / "run")
        assert not (tmp_path / "run").exists()
    train_ok = compose_cfg(["experiment=bert_imdb", "data.max_len=600", "model.max_len=600",
                            "positional.max_len=600"])
    from attnflow.training.validate import resolve_config
    assert resolve_config(train_ok)["data"]["max_len"] == 600


@pytest.mark.parametrize("overrides, longest", [
    # reverse: ⟨bos⟩ + max_len target tokens in training, outputs decoded to max_len + 2
    (["experiment=reverse_transformer", "data.max_len=10"], 12),
    # Multi30k: max(max_src_len, max_tgt_len + 1, max_decode_len or max_tgt_len + 2)
    (["experiment=mt_transformer", "data.max_src_len=40", "data.max_tgt_len=30"], 40),
    (["experiment=mt_transformer", "data.max_src_len=20", "data.max_tgt_len=30"], 32),
    (["experiment=mt_transformer", "data.max_src_len=20", "data.max_tgt_len=30",
      "data.max_decode_len=50"], 50),
])
def test_learned_positions_shorter_than_the_data_are_refused_before_any_work(tmp_path, overrides,
                                                                               longest):
    """A learned position table refused a longer sequence only at the first such batch, mid-run
    (decoding the first validation batch, for reverse). The bound is the table's length against
    the data config's longest sequence; one position fewer is refused, exactly enough builds."""
    from attnflow.training.validate import resolve_config

    short = [*overrides, "positional=learned", f"positional.max_len={longest - 1}"]
    with pytest.raises(ConfigError, match=rf"positional.max_len={longest - 1} \(learned positions\) "
                                          rf"is shorter than the {longest} positions the data gives"):
        train(compose_cfg(short), tmp_path / "run")
    assert not (tmp_path / "run").exists()
    enough = [*overrides, "positional=learned", f"positional.max_len={longest}"]
    assert resolve_config(compose_cfg(enough))["model"]["positional"]["max_len"] == longest


@pytest.mark.slow
def test_learned_positions_cover_what_the_reverse_run_decodes(tmp_path):
    """The bound is exact: the run with the shortest table the check allows trains and decodes."""
    train(compose_cfg([*TINY, "experiment=reverse_transformer", "data.max_len=10",
                       "positional=learned", "positional.max_len=12", "trainer.limit_train_batches=2",
                       "trainer.limit_val_batches=2", "trainer.limit_test_batches=2"]), tmp_path / "run")
    assert (tmp_path / "run" / "metrics.json").is_file()


SWAP_ENCODER = ["model.encoder.name=transformer_encoder", "model.encoder.positional.name=learned"]


@pytest.mark.parametrize("overrides, longest", [
    # reverse: sources of at most max_len symbols (targets and decoding do not reach the encoder)
    (["data.max_len=10"], 10),
    # Multi30k: every split's sources, and attnflow-translate's lines, cut to max_src_len
    (["experiment=mt_rnnsearch", "data.max_src_len=40", "data.max_tgt_len=60"], 40),
    # IMDB documents, read flat by self_attentive: max_sentences × max_words words
    (["experiment=self_attentive_imdb", "data.max_sentences=3", "data.max_words=5",
      "model.encoder.d_model=64"], 15),
])
@pytest.mark.slow
def test_learned_positions_of_a_models_own_encoder_shorter_than_its_input_are_refused(tmp_path,
                                                                                       overrides, longest):
    """A transformer_encoder with a learned table inside seq2seq or self_attentive refused a longer
    input only at the first such batch, mid-run (after the data was read: minutes on IMDB), with
    a message pointing at the shared positional group, which those models do not use. Now one
    position fewer than the data gives the encoder is refused before any work, naming the
    encoder's own field; exactly enough resolves."""
    from attnflow.training.validate import resolve_config

    short = [*overrides, *SWAP_ENCODER, f"model.encoder.positional.max_len={longest - 1}"]
    with pytest.raises(ConfigError, match=rf"model.encoder.positional.max_len={longest - 1} \(learned "
                                          rf"positions\) is shorter than the {longest} positions the "
                                          rf"data gives the encoder"):
        train(compose_cfg(short, return_hydra_config=True), tmp_path / "run")
    assert not (tmp_path / "run").exists()
    enough = [*overrides, *SWAP_ENCODER, f"model.encoder.positional.max_len={longest}"]
    resolved = resolve_config(compose_cfg(enough, return_hydra_config=True))
    positional = resolved["model"]["encoder"]["positional"]
    assert (positional["name"], positional["max_len"]) == ("learned", longest)


@pytest.mark.parametrize("overrides, width", [
    (["model.encoder.attention.name=multihead", "model.encoder.attention.heads=3"], 64),  # embed_dim
    (["experiment=self_attentive_imdb"], 100),                                           # its embed_dim
    (["model.encoder.d_model=30"], 30),                                                  # the encoder's own
])
def test_heads_of_a_models_own_encoder_are_checked_naming_its_fields(tmp_path, overrides, width):
    """transformer_encoder inside seq2seq or self_attentive: heads that do not divide its width were
    refused telling the user to change attention.heads, a shared group these models refuse as
    unused. The message names the encoder's own field; a width the heads divide builds."""
    from attnflow.training.validate import resolve_config

    cmd = ["model.encoder.name=transformer_encoder", *overrides]
    heads = 3 if "model.encoder.attention.heads=3" in overrides else 8
    with pytest.raises(ConfigError, match=rf"the query size {width} \(model.encoder.d_model, else "
                                          rf"model.embed_dim\) is not divisible by heads {heads}; change "
                                          rf"model.encoder.attention.heads or set model.encoder."
                                          rf"attention.head_dim"):
        train(compose_cfg(cmd, return_hydra_config=True), tmp_path / "run")
    assert not (tmp_path / "run").exists()
    fits = [*cmd, "model.encoder.attention.name=multihead", f"model.encoder.attention.heads={width // 2 if width % 2 == 0 else width}"]
    resolve_config(compose_cfg(fits, return_hydra_config=True))


@pytest.mark.slow
def test_a_seq2seq_encoder_with_the_shortest_table_allowed_trains_and_decodes(tmp_path):
    """The encoder's bound is exact: reverse sources of up to max_len=10 symbols, a learned table of
    10 positions, through training, validation and test."""
    train(compose_cfg([*TINY, *SWAP_ENCODER, "model.encoder.positional.max_len=10",
                       "data.max_len=10"], return_hydra_config=True), tmp_path / "run")
    assert (tmp_path / "run" / "metrics.json").is_file()


ANY_DEVICE = [o for o in FAST if not o.startswith("trainer.accelerator=")]  # FAST asks for the CPU


@pytest.mark.parametrize("accelerator, says", [
    ("mps", "`MPSAccelerator` can not run on your system"),
    ("tpu", "Requirement 'torch_xla"),  # Lightning's ModuleNotFoundError
])
def test_an_accelerator_the_machine_lacks_is_lightnings_message(monkeypatch, tmp_path, accelerator, says):
    from pytorch_lightning.accelerators import MPSAccelerator

    if accelerator == "tpu" and importlib.util.find_spec("torch_xla") is not None:
        pytest.skip("torch_xla is installed here: Lightning would not refuse tpu for want of it")
    monkeypatch.setattr(MPSAccelerator, "is_available", staticmethod(lambda: False))
    with pytest.raises(ConfigError) as err:
        train(compose_cfg([*ANY_DEVICE, f"trainer.accelerator={accelerator}"]), tmp_path / "run")
    assert str(err.value).startswith("trainer: ") and says in str(err.value)
    assert not (tmp_path / "run").exists()  # refused before the run folder


@pytest.mark.parametrize("overrides, expected", [
    ([*FAST, "data.symbols=1"], "data 'reverse': field 'symbols' (at 'data.symbols') must be >= 2, got 1"),
    (["experiment=gat_synthetic", "data.multi_label=true"],
     "the data's labels are multi-label ((N, C) 0/1); set task.multi_label=true"),
    (["experiment=reverse_transformer", "attention.heads=3"],
     "attention 'multihead': the query size 64 (model.d_model of a Transformer or BERT, "
     "model.decoder.hidden_dim of an RNN decoder) is not divisible by heads 3"),
    (["experiment=bert_imdb", "model.d_model=250"],
     "attention 'multihead': the query size 250 (model.d_model of a Transformer or BERT, "
     "model.decoder.hidden_dim of an RNN decoder) is not divisible by heads 4"),
])
def test_fields_that_do_not_fit_together_are_refused_before_any_work(overrides, expected, tmp_path):
    """Checks across fields (the blocks' ``check_config``, run before the data is made), which
    the constructors made only after the run directory was written (the data modules' with a
    traceback; the attention heads' after a translation run had trained its tokenizers)."""
    with pytest.raises(ConfigError) as err:
        train(compose_cfg([*overrides, "logger=none"]), tmp_path / "run")
    assert expected in str(err.value)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("overrides, expected", [
    ([*FAST, "data.min_len=10", "data.max_len=5"],
     "need 1 <= min_len <= max_len (at 'data.min_len', 'data.max_len'), got 10, 5"),
    (["experiment=gat_synthetic", "data.num_nodes=10", "data.split=[0.05,0.5]"],
     "split [0.05, 0.5] of 10 nodes leaves an empty split (0 train, 5 val, 5 test)"),
    (["experiment=gat_synthetic", "data.split=[0.5,0.6]"],
     "field 'split' (at 'data.split') must be [train, val] fractions with train + val < 1"),
    (["experiment=caption_shapes", "data.grid=1"], "data 'shapes': grid must be >= 2"),
    (["experiment=caption_shapes", "data.max_shapes=12"], "need 1 <= min_shapes <= max_shapes <= 4"),
    (["experiment=mt_transformer", "data.tgt_lang=de"], "data.src_lang and data.tgt_lang are both 'de'"),
])
def test_data_fields_that_do_not_fit_together_are_refused_before_training(overrides, expected,
                                                                          tmp_path):
    """The data module's constructor refuses them, before any data is read."""
    with pytest.raises(ConfigError) as err:
        train(compose_cfg([*overrides, "logger=none"]), tmp_path / "run")
    assert expected in str(err.value)
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_a_refused_field_that_takes_its_value_from_another_names_that_one(tmp_path):
    """gat_synthetic sets data.num_hops: ${model.layers}; the user who set model.layers=0 is told
    where data.num_hops's 0 came from. A field set directly gets no such note."""
    with pytest.raises(ConfigError) as err:
        train(compose_cfg(["experiment=gat_synthetic", "model.layers=0"]), tmp_path / "run")
    assert str(err.value).endswith("(at 'data.num_hops') must be >= 1, got 0 (data.num_hops is "
                                   "${model.layers} in this config: the value comes from there)")
    with pytest.raises(ConfigError) as err:
        train(compose_cfg(["experiment=gat_synthetic", "data.num_hops=0"]), tmp_path / "run")
    assert str(err.value).endswith("(at 'data.num_hops') must be >= 1, got 0")
    assert not (tmp_path / "run").exists()


def _cli(*args, tmp_path, interpreter=()):
    """``python [INTERPRETER] -m attnflow.cli.train ARGS`` in a fresh interpreter."""
    env = dict(os.environ, ATTNFLOW_OUTPUT_DIR=str(tmp_path), HYDRA_FULL_ERROR="0")
    return subprocess.run([sys.executable, *interpreter, "-m", "attnflow.cli.train", *args], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=120)


def _main(monkeypatch, capsys, tmp_path, *args):
    """attnflow-train's main() with ``args`` in this process (a fresh interpreter's imports cost
    seconds; the fresh-interpreter path is the next test's): (exit status, stdout, stderr)."""
    monkeypatch.setenv("ATTNFLOW_OUTPUT_DIR", str(tmp_path))
    monkeypatch.setenv("HYDRA_FULL_ERROR", "0")
    code = train_cli(monkeypatch, *args)
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.slow
def test_cli_unknown_block_name_prints_one_message(tmp_path, monkeypatch, capsys):
    code, out, err = _main(monkeypatch, capsys, tmp_path, "scorer.name=dott")
    assert code == 2
    assert "attnflow: config error: unknown scorer 'dott'" in err
    assert "Traceback" not in err + out
    assert list(tmp_path.iterdir()) == []  # Hydra's run folder (.hydra/, train.log) is not left behind


@pytest.mark.slow
def test_attnflows_warnings_are_one_line_without_its_source(tmp_path, monkeypatch, capsys):
    """A block swap leaves out the old block's fields with a warning; it printed as Python does,
    attnflow's file, line number and source line (``run.py:643: UserWarning: … /
    drop_swapped_block_fields(cfg, typed or ())``), pointing into attnflow rather than at the
    command line. attnflow-train prints it as ``attnflow: warning: …``; others keep Python's form."""
    import warnings

    from attnflow.io.console import plain_warnings
    from attnflow.config.registry import AttnflowWarning

    code, out, err = _main(monkeypatch, capsys, tmp_path, "model=rnnsearch",
                           "model.encoder.name=transformer_encoder", "model.encoder.d_model=30")
    assert code == 2  # (8 heads do not divide 30: refused after the swap's warning, before any work)
    lines = err.splitlines()
    assert ("attnflow: warning: encoder 'transformer_encoder' has no field model.encoder.hidden_dim: "
            "set for the encoder that model.encoder.name=transformer_encoder replaced, left out") in lines
    assert ".py:" not in err and "drop_swapped_block_fields" not in err, err
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        plain_warnings()
        plain_warnings()  # installed once: one line, not two
        warnings.warn("ours", AttnflowWarning)
        with pytest.warns(UserWarning, match="theirs"):  # as Python shows it (here: pytest records it)
            warnings.warn("theirs", UserWarning)
    err = capsys.readouterr().err
    assert err.count("attnflow: warning: ours\n") == 1 and "theirs" not in err, err  # (pytest's)


@pytest.mark.slow
def test_a_shared_groups_field_typed_under_the_model_is_refused_by_the_block(tmp_path, monkeypatch,
                                                                             capsys):
    """model.attention.heads=2 replaces the model's ``${attention}`` with a block of no name."""
    code, out, err = _main(monkeypatch, capsys, tmp_path, "experiment=reverse_transformer",
                           "model.attention.heads=2")
    assert code == 2 and "Traceback" not in err + out
    assert "'model.attention' needs a 'name'" in err and "(it holds only heads)" in err, err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_a_run_refused_by_its_data_before_any_step_leaves_nothing_it_wrote(tmp_path, monkeypatch,
                                                                          capsys):
    """A missing data file is found only after the run wrote its config.yaml (the data module
    reads the files); still before any training step, so the run's folder goes as a config
    error's does. A folder that holds files but no run (hydra.run.dir) is refused untouched."""
    empty = tmp_path / "no-data"
    empty.mkdir()
    code, _, err = _main(monkeypatch, capsys, tmp_path / "outputs", "experiment=gat_cora",
                         f"paths.data_dir={empty}")
    assert code == 2 and "attnflow: data error: data 'planetoid': Cora is missing" in err
    assert "Traceback" not in err
    assert list((tmp_path / "outputs").iterdir()) == []
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("kept")
    code, _, err = _main(monkeypatch, capsys, tmp_path / "outputs", "experiment=gat_cora",
                         f"paths.data_dir={empty}", f"hydra.run.dir={mine}")
    assert code == 2 and f"hydra.run.dir={mine} holds files but no run (notes.txt)" in err
    assert sorted(p.name for p in mine.iterdir()) == ["notes.txt"]


@pytest.mark.parametrize("overrides, says", [
    (["data.test_size=0"], "data 'reverse': data.test_size=0, so there is no test split; run with "
                           "test=false"),
    (["experiment=caption_shapes", "data.train_size=32", "data.val_size=8", "data.test_size=0",
      "data.size=48", "model.encoder.channels=[8,8]"], "test_size=0, so there is no test split"),
])
@pytest.mark.slow
def test_a_test_split_that_is_not_there_is_refused_before_any_step(tmp_path, monkeypatch, capsys,
                                                                    overrides, says):
    """test=true (the default) where the data has no test split: the run trained, then failed at
    its test (captioning), or tested an empty split and reported no test metric, so an
    optimized_metric=test/… failed after training (reversal). Refused once the data is read,
    before any step, leaving no run folder; with test=false the same run trains (the reversal's
    here; a captioning step: test_config_tree's caption_shapes run)."""
    tiny = [*TINY, "trainer.max_steps=1", "trainer.limit_val_batches=1"]
    code, _, err = _main(monkeypatch, capsys, tmp_path / "outputs", *tiny, *overrides)
    assert code == 2 and says in err and "Traceback" not in err, err
    assert list((tmp_path / "outputs").iterdir()) == []
    if "experiment=caption_shapes" not in overrides:
        code, _, err = _main(monkeypatch, capsys, tmp_path / "outputs", *tiny, *overrides,
                             "test=false")
        assert code == 0, err


@pytest.mark.slow
def test_a_data_error_after_training_keeps_the_run(tmp_path, monkeypatch, capsys):
    """The same error after training steps (here: from the checkpoint averaging that follows the
    fit) keeps everything the run wrote: its checkpoints and config.yaml."""
    from attnflow.training import averaging
    from attnflow.data.errors import DataError

    def fail(*args, **kwargs):
        raise DataError("data 'x': unreadable after the fit")

    monkeypatch.setattr(averaging, "finish", fail)
    code, _, err = _main(monkeypatch, capsys, tmp_path / "outputs", *TINY, "test=false",
                         f"hydra.run.dir={tmp_path / 'cli'}")
    assert code == 2 and "unreadable after the fit" in err
    assert (tmp_path / "cli" / "config.yaml").is_file()
    assert list((tmp_path / "cli" / "checkpoints").glob("*.ckpt"))


def test_cli_unknown_group_option_lists_options(tmp_path):
    """In a fresh interpreter, as users run it: one line naming the group, the options in its
    folder of conf/ and the nearest, exit status 2, before Hydra composes and before Lightning
    is imported (``-X importtime`` lists every module the process imported)."""
    proc = _cli("scorer=dott", tmp_path=tmp_path, interpreter=("-X", "importtime"))
    assert proc.returncode == 2, proc.stderr
    options = sorted(p.stem for p in (ROOT / "conf" / "scorer").glob("*.yaml"))
    message = [line for line in proc.stderr.splitlines() if not line.startswith("import time:")]
    assert message == [f"attnflow: config error: scorer has no option 'dott' (at 'scorer=dott'); "
                       f"options: {', '.join(options)} (files in {ROOT / 'conf' / 'scorer'}). "
                       f"Did you mean 'dot'?"]
    imported = {line.split("|")[-1].strip() for line in proc.stderr.splitlines()
                if line.startswith("import time:")}
    assert "hydra.core.override_parser.overrides_parser" in imported  # the import log is read
    assert not {"pytorch_lightning", "torch"} & imported
    assert not list(tmp_path.iterdir())  # no run directory


@pytest.mark.parametrize("args, refused", [
    (["-m", "scorer=dot,dott"], "scorer has no option 'dott' (at 'scorer=dot,dott')"),  # a sweep's value
    (["logger=[csv,wandbb]"], "logger has no option 'wandbb' (at 'logger=[csv,wandbb]')"),
    (["+experiment=gat_coar"], "experiment has no option 'gat_coar' (at '+experiment=gat_coar')"),
    (["hparams_search=reverse_grd"], "hparams_search has no option 'reverse_grd'"),
    # a key under a top-level key the root config lacks: as the run says it (validate_config)
    (["seed=3", "trainr.max_epochs=3"], "the config has no top-level key 'trainr'; keys: aggregator, "
                                        "attention, callbacks,"),
    (["+sed=3"], "the config has no top-level key 'sed'"),
])
def test_a_name_missing_from_conf_is_refused_in_one_line(args, refused):
    from attnflow.cli.help import unknown_override

    assert unknown_override(args, ROOT / "conf").startswith(refused)


@pytest.mark.parametrize("args", [
    ["scorer=dot", "logger=[csv,wandb]", "experiment=gat_cora", "-m", "aggregator=mean,concat"],
    ["scorer=null", "experiment=null", "~positional", "model.encoder.name=lstm_encoder"],
    ["hydra.job.chdir=false", "paths.data_dir=/x", "callbacks.average.last=3", "-m", "seed=1,2"],
    ["hydra/launcher=ray"],  # Hydra's groups: an installed plugin may add options
    ["scorer=glob(*)", "data=${oops}", "scorer@model.scorer=dot"],  # left to Hydra
    ["--config-dir", "/elsewhere", "experiment=mine"],  # a folder whose options it does not see
    ["hydra.searchpath=[file:///elsewhere]", "experiment=mine", "mygroup=x"],
])
def test_group_options_it_cannot_judge_are_left_to_hydra(args):
    from attnflow.cli.help import unknown_override

    assert unknown_override(args, ROOT / "conf") is None


def test_a_foreign_hydra_plugin_leaves_group_options_to_hydra(tmp_path, monkeypatch):
    """A Hydra plugin other than attnflow's launchers and sweeper may add a config folder (its
    search-path plugin), whose options and groups the check cannot see."""
    from attnflow.cli.help import unknown_override

    assert unknown_override(["experiment=mine"], ROOT / "conf").startswith("experiment has no option")
    (tmp_path / "hydra_plugins" / "my_searchpath").mkdir(parents=True)  # a namespace package's part
    (tmp_path / "hydra_plugins" / "my_searchpath" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert unknown_override(["experiment=mine", "mygroup=x"], ROOT / "conf") is None


def test_a_non_finite_loss_stops_training_naming_the_step(tmp_path):
    from attnflow.training.callbacks import NonFiniteLossError

    cfg = compose_cfg([*TINY, "task.optim.lr=1e30", "trainer.gradient_clip_val=null"])
    with pytest.raises(NonFiniteLossError, match=r"training loss is (nan|inf|-inf) at epoch 0, step \d+"):
        train(cfg, tmp_path / "run")
    assert not (tmp_path / "run" / "metrics.json").exists()
    assert not list((tmp_path / "run").glob("checkpoints/*.ckpt"))  # no checkpoint of broken weights


@pytest.mark.slow
def test_cli_non_finite_loss_exits_non_zero_with_one_message(tmp_path, monkeypatch, capsys):
    code, _, err = _main(monkeypatch, capsys, tmp_path, *TINY, "task.optim.lr=1e30",
                         "trainer.gradient_clip_val=null",
                         f"hydra.run.dir={tmp_path / 'run'}")
    assert code == 1
    assert "attnflow: the training loss is" in err and "Traceback" not in err


def test_under_ddp_any_ranks_non_finite_loss_stops_every_rank():
    """A rank whose own loss is finite stops too when another rank's is not (else it would wait
    in the next all-reduce for a rank that has stopped): the ranks' decision is an any-reduce."""
    from types import SimpleNamespace

    from attnflow.training.callbacks import NonFiniteLossError, StopOnNonFiniteLoss

    asked = []

    def reduce_any(decision, all=True):  # noqa: A002  (Lightning's parameter name)
        asked.append((decision, all))
        return True  # another rank saw NaN

    trainer = SimpleNamespace(world_size=2, current_epoch=1, global_step=7,
                              strategy=SimpleNamespace(reduce_boolean_decision=reduce_any))
    with pytest.raises(NonFiniteLossError, match="non-finite on another rank at epoch 1, step 7"):
        StopOnNonFiniteLoss().on_train_batch_end(trainer, None, {"loss": torch.tensor(0.5)}, None, 3)
    assert asked == [(False, False)]  # its own (finite) decision, reduced with any()
    single = SimpleNamespace(world_size=1, current_epoch=0, global_step=1, strategy=None)
    StopOnNonFiniteLoss().on_train_batch_end(single, None, {"loss": torch.tensor(0.5)}, None, 0)


@pytest.mark.parametrize("module, argv, option", [
    ("evaluate", ["RUN", "-o", ""], "-o/--output"),
    ("evaluate", [""], "run"),
    ("report", ["RUN", "-o", ""], "-o/--out"),
    ("translate", ["RUN", "--save-attention", ""], "--save-attention"),
    ("translate", ["RUN", "-f", " "], "-f/--file"),
    ("predict", ["RUN", "--explain", ""], "--explain"),
    ("predict", ["RUN", "-o", ""], "-o/--output"),
    ("average", ["RUN", "--name", ""], "--name"),
])
def test_an_empty_path_argument_is_refused_by_name(module, argv, option, tmp_path, monkeypatch, capsys):
    """``attnflow-eval RUN -o "$OUT"`` with OUT unset: the empty path was taken as not given (the
    metrics went to RUN/eval/, predictions to stdout, --explain was skipped) or as the current
    folder. Each console script refuses it, naming the option, before reading anything."""
    import importlib

    monkeypatch.chdir(tmp_path)
    main = importlib.import_module(f"attnflow.cli.{module}").main
    with pytest.raises(SystemExit) as done:
        main(argv)
    assert done.value.code == 2
    err = capsys.readouterr().err
    assert f"error: argument {option}: an empty path names no file or folder" in err, err
    assert list(tmp_path.iterdir()) == []


def test_what_lightning_refuses_as_a_fit_starts_is_one_line_and_leaves_nothing(tmp_path, monkeypatch,
                                                                            capsys):
    """``val_check_interval`` above the batches of an epoch (2 of 32): Lightning refuses it in
    the fit's first steps, after the run made its folder; one line, exit 2, the folder gone. A
    model's own ValueError there keeps its traceback (it is not a setting's)."""
    code, _, err = _main(monkeypatch, capsys, tmp_path / "outputs", "data.train_size=64",
                         "data.batch_size=32", "trainer.val_check_interval=100")
    assert code == 2 and "Traceback" not in err
    assert err.splitlines()[-1] == (
        "attnflow: config error: trainer: `val_check_interval` (100) must be less than or equal "
        "to the number of the training batches (2). If you want to disable validation set "
        "`limit_val_batches` to 0.0 instead. If you want to validate based on the total training "
        "batches, set `check_val_every_n_epoch=None`.")
    assert list((tmp_path / "outputs").iterdir()) == []


def test_a_models_value_error_at_the_start_of_a_fit_is_not_a_setting(monkeypatch, tmp_path):
    from attnflow.tasks.seq2seq import Seq2SeqTask

    def broken(self, batch, split):
        raise ValueError("a bug in the model")

    monkeypatch.setattr(Seq2SeqTask, "step", broken)
    with pytest.raises(ValueError, match="a bug in the model"):
        train(compose_cfg([*FAST, "logger=none"]), tmp_path)
