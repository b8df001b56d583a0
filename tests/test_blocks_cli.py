"""attnflow-blocks lists every registered block with its fields and defaults."""

from __future__ import annotations

import subprocess
import sys

import pytest

from attnflow.cli.blocks import main
from attnflow.config.registry import Registry


def test_lists_every_block_with_fields(capsys):
    assert main([]) == 0
    out = capsys.readouterr().out
    for kind, registry in Registry.kinds().items():
        if kind.startswith("test_"):
            continue
        assert f"{kind} blocks" in out
        for name in registry.names():
            assert name in out
    assert "hidden_dim" in out and "128" in out  # additive's field and default
    assert "BlockSpec[scorer]" in out


def test_one_kind_and_unknown_kind(capsys):
    assert main(["aggregator"]) == 0
    out = capsys.readouterr().out
    assert "concat_proj" in out and "scorer blocks" not in out
    with pytest.raises(SystemExit) as exc:
        main(["scorers"])
    assert exc.value.code == 2 and "invalid choice: 'scorers'" in capsys.readouterr().err


@pytest.mark.slow
def test_console_script_is_installed():
    proc = subprocess.run([sys.executable, "-m", "attnflow.cli.blocks", "normalizer"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "softmax" in proc.stdout and "positive" in proc.stdout


def test_config_shows_what_a_run_uses_with_defaults_filled_in(capsys):
    import yaml

    from attnflow.cli.blocks import main

    assert main(["--config", "experiment=reverse_transformer", "scorer=dot"]) == 0
    shown = yaml.safe_load(capsys.readouterr().out)
    assert shown["attention"]["heads"] == 4 and shown["attention"]["scorer"] == {"name": "dot"}
    assert shown["model"]["encoder_layers"] == 2 and shown["model"]["norm"] == "post"  # a default
    assert "pooling" not in shown  # not used by the Transformer
    assert main(["--config", "aggregator=mean"]) == 2
    assert "does nothing" in capsys.readouterr().err


@pytest.mark.slow
def test_config_of_a_resumed_run_is_that_runs_and_bad_options_are_one_line(capsys, tmp_path):
    """resume=<run> shows the run's own config (it showed the default's), after the checks
    attnflow-train makes; an option Hydra cannot find is its one message, not a traceback."""
    import yaml

    from attnflow.cli.blocks import main
    from attnflow.training.run import train
    from support import FAST, compose_cfg

    run = tmp_path / "run"
    train(compose_cfg([*FAST, "data.train_size=64", "data.symbols=7", "trainer.limit_val_batches=1",
                       "test=false", "logger=none"]), run)
    capsys.readouterr()  # the training's own output
    assert main(["--config", f"resume={run}", "trainer.max_epochs=2"]) == 0
    shown = yaml.safe_load(capsys.readouterr().out)
    assert shown["data"]["train_size"] == 64 and shown["data"]["symbols"] == 7
    assert main(["--config", f"resume={tmp_path / 'none'}"]) == 2
    assert "not an attnflow run directory" in capsys.readouterr().err
    assert main(["--config", f"resume={run}", "model.encoder.hidden_dim=8"]) == 2
    assert "'model.encoder.hidden_dim' would change the resumed run" in capsys.readouterr().err
    assert main(["--config", "experiment=nosuch"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("attnflow: config error: experiment has no option 'nosuch' (at "
                          "'experiment=nosuch'); options: bert_imdb,") and "Traceback" not in err
