"""What a run tells its user: its folder as it starts and ends, a model table without empty
columns, no Lightning tips; its train.log keeps the epoch lines and the final table; a sweep
prints its folder and ends with its runs ranked."""

from __future__ import annotations

import json
import re

import pytest

from support import FAST, train_cli

RUN = [*FAST, "trainer.limit_train_batches=2", "trainer.limit_val_batches=1",
       "trainer.limit_test_batches=1", "logger=csv"]


@pytest.mark.slow
def test_a_run_says_where_it_is_and_its_train_log_keeps_the_epochs_and_the_table(
        tmp_path, monkeypatch, capsys):
    run = tmp_path / "run"
    assert train_cli(monkeypatch, *RUN, "trainer.max_epochs=2", f"hydra.run.dir={run}") == 0
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.strip()]
    assert lines[0] == lines[-1] == f"run folder: {run}"
    for noise in ("litlogger", "Tip:", "FLOPs", "GPU available"):
        assert noise not in out, noise
    assert re.search(r"^[\d,]+ parameters, [\d.]+ MB; cpu × 1, precision 32-true$", out, re.M)
    log = (run / "train.log").read_text()
    assert f"run folder: {run}" in log
    epochs = re.findall(r"epoch (\d)/1 done in \d+:\d\d: train/loss=\S+ val/loss=(\S+)", log)
    metrics = json.loads((run / "metrics.json").read_text())
    assert [e for e, _ in epochs] == ["0", "1"]  # 0-based, as the checkpoints' names
    assert epochs[-1][1] == f"{metrics['metrics']['val/loss']:.4g}"  # val/loss: the last epoch's
    # the final table: the best checkpoint's metrics of metrics.json, as the console showed them
    table = log[log.index("final metrics (best checkpoint)"):]
    assert table in out.replace("\r", "") or table.strip() in out
    for name in ("loss", "seq_acc", "token_acc"):
        row = next(line for line in table.splitlines() if line.startswith(f"│ {name} "))
        values = [float(v) for v in row.strip("│").split("│")[1:]]
        assert values == [float(f"{metrics['metrics'][f'{s}/{name}']:.4g}") for s in ("best/val", "test")]


@pytest.mark.slow
def test_a_sweep_prints_its_folder_first_and_ends_with_its_runs_ranked(tmp_path, monkeypatch, capsys):
    sweep = tmp_path / "sweep"
    assert train_cli(monkeypatch, "-m", *RUN, "task.optim.lr=0.0001,0.01,0.003", "logger=none",
                     "optimized_metric=val/token_acc", f"hydra.sweep.dir={sweep}") == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.strip()]
    assert lines[0] == f"sweep folder: {sweep}"
    assert lines[-1] == f"sweep folder: {sweep} (the full report: attnflow-report {sweep})"
    # the table after the last job: its runs best first by the metric the sweep optimises
    acc = {str(n): json.loads((sweep / str(n) / "metrics.json").read_text())["metrics"]["best/val/token_acc"]
           for n in range(3)}
    last_job = max(i for i, line in enumerate(lines) if line.startswith("run folder:"))
    rows = [line.strip("│ ").split("│") for line in lines[last_job:] if re.match(r"│ \d ", line)]
    assert [r[0].strip() for r in rows] == sorted(acc, key=acc.get, reverse=True)
    assert [float(r[-1]) for r in rows] == sorted((float(f"{v:.4g}") for v in acc.values()), reverse=True)


@pytest.mark.slow
def test_lines_a_library_logs_look_like_attnflows_own(tmp_path, monkeypatch, capsys):
    """The data module's INFO lines (Python logging under Hydra's job logging): plain on the
    console like attnflow's own lines, stamped ``[date time]`` in train.log like its own."""
    from cli_runs import document_files, document_overrides

    run = tmp_path / "run"
    args = document_overrides(document_files(tmp_path / "docs"))
    assert train_cli(monkeypatch, *args, "trainer.max_epochs=1", f"hydra.run.dir={run}") == 0
    out = capsys.readouterr().out
    assert re.search(r"^data 'documents': vocabulary \d+ words, 2 classes", out, re.M)
    log = (run / "train.log").read_text()
    stamp = r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\] "
    assert re.search(stamp + r"data 'documents': vocabulary \d+ words", log, re.M)
    assert re.search(stamp + f"run folder: {re.escape(str(run))}$", log, re.M)
    assert "[INFO]" not in out + log and "][" not in out + log
