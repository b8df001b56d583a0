"""attnflow-report on a real small multirun (2 jobs through the console script's main()), on one run,
on a sweep with a failed job, on a hand-built Optuna study, on bad paths, and its page rendered in
headless Chromium. Expected values come from the jobs' own metrics.json files, read here."""

from __future__ import annotations

import base64
import contextlib
import csv
import hashlib
import io
import json
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest
import yaml

from attnflow.cli.report import main
from attnflow.viz.runs import MISSING, NOT_A_RUN
from support import (CHROMIUM, CHROMIUM_MISSING, FAST, PLOT_BOXES_PROBE, chromium_dom, chromium_flags,
                     optuna_sweep_folder, plots_in_screenshot, train_cli)

# FAST, smaller still, with two epochs so that learning curves have two points, and a picture.
TINY = {**dict(o.split("=", 1) for o in FAST), "data.train_size": "64", "data.val_size": "32",
        "data.test_size": "32", "trainer.max_epochs": "2", "trainer.enable_model_summary": "false",
        "callbacks.attention_maps.examples": "1"}


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> Path:
    """A real Hydra multirun of the default experiment: scorer=dot (job 0), additive (job 1)."""
    out = tmp_path_factory.mktemp("outputs")
    args = ["-m", "scorer=dot,additive", "optimized_metric=val/loss", *(f"{k}={v}" for k, v in TINY.items())]
    with pytest.MonkeyPatch.context() as mp:  # attnflow-train in this process
        mp.setenv("ATTNFLOW_OUTPUT_DIR", str(out))
        mp.chdir(out)
        assert train_cli(mp, *args) == 0
    (folder,) = out.glob("multirun/*/*")
    return folder


@pytest.fixture(scope="module")
def sweep_report(sweep, tmp_path_factory):
    """The report of ``sweep`` and what the command printed."""
    out = tmp_path_factory.mktemp("report")
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        main([str(sweep), "-o", str(out)])
    return out, printed.getvalue()


class Page(HTMLParser):
    """The runs table (rows by data-run) and every <img> of a report page."""

    def __init__(self, text: str):
        super().__init__()
        self.rows, self.header, self.imgs, self.scripts = {}, [], [], 0
        self._row = self._cell = None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "tr" and "data-run" in a:
            self._row = self.rows.setdefault(a["data-run"], {"class": a.get("class"), "cells": []})
        elif tag in ("td", "th"):
            self._cell = ""
        elif tag == "img":
            self.imgs.append(a)
        elif tag == "script":
            self.scripts += 1

    def handle_data(self, data):
        if self._cell is not None:
            self._cell += data

    def handle_endtag(self, tag):
        if tag == "th" and self._cell is not None:
            self.header.append(self._cell)
        elif tag == "td" and self._row is not None:
            self._row["cells"].append(self._cell)
        elif tag == "tr":
            self._row = None
        if tag in ("td", "th"):
            self._cell = None


def job_metrics(sweep: Path) -> dict:
    return {d.name: json.loads((d / "metrics.json").read_text())["metrics"]
            for d in sweep.iterdir() if (d / "metrics.json").is_file()}


def read_csv(path: Path):
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def test_sweep_report_matches_the_jobs(sweep, sweep_report):
    out, printed = sweep_report
    jobs = job_metrics(sweep)
    assert set(jobs) == {"0", "1"}
    order = sorted(jobs, key=lambda j: jobs[j]["best/val/loss"])  # optimized_metric val/loss: its result, lower first
    scorer = {"0": "dot", "1": "additive"}  # Hydra's job order of scorer=dot,additive

    rows = read_csv(out / "report.csv")
    assert [r["run"] for r in rows] == order
    for r in rows:
        assert r["status"] == "ok" and r["scorer"] == scorer[r["run"]]
        for name, value in jobs[r["run"]].items():
            assert float(r[name]) == value, (r["run"], name)
    assert list(rows[0])[3] == "best/val/loss"  # the sort metric is the first metric column

    page_text = (out / "report.html").read_text()
    page = Page(page_text)
    assert list(page.rows) == order
    assert page.rows[order[0]]["class"] == "best"
    for job, row in page.rows.items():
        cells = dict(zip(page.header, row["cells"]))
        assert cells["scorer"] == scorer[job]
        for name, value in jobs[job].items():
            assert cells[name] == f"{value:.4g}", (job, name)
    # self-contained: every picture inline, decodable PNG; no script, no external reference
    assert page.imgs and page.scripts == 0 and "http" not in page_text
    for img in page.imgs:
        assert img["src"].startswith("data:image/png;base64,")
        assert base64.b64decode(img["src"].split(",", 1)[1])[:8] == b"\x89PNG\r\n\x1a\n"
    alts = [i["alt"] for i in page.imgs]
    assert "best/val/loss against scorer" in alts and "learning curves: val/loss" in alts
    pictures = sorted(f"attention: {j}/{p.name}" for j in ("0", "1")
                      for p in sorted((sweep / j / "attention").glob("*.png"))[:4])
    assert sorted(a for a in alts if a.startswith("attention: ")) == pictures

    md = (out / "report.md").read_text()
    md_rows = [line for line in md.splitlines() if line.startswith("| ") and not line.startswith("| run")]
    assert [line.split(" | ")[0][2:] for line in md_rows] == order
    for line in md_rows:
        job = line.split(" | ")[0][2:]
        assert f" {jobs[job]['test/loss']:.4g} " in line and f" {scorer[job]} " in line
    for target in [t.split(")")[0] for t in md.split("](")[1:]]:
        assert (out / target).is_file(), target  # every image and link resolves beside report.md

    # the terminal table: both jobs, their scorer and val/loss, best first
    lines = [line for line in printed.splitlines() if any(f" {s} " in line for s in scorer.values())]
    assert [scorer[j] in line for j, line in zip(order, lines)] == [True, True]
    for j, line in zip(order, lines):
        assert f"{jobs[j]['best/val/loss']:.4g}" in line


def test_learning_curves_follow_the_csv_history(sweep):
    from attnflow.viz.runs import history, read_run

    run = read_run(sweep / "0", "0")
    rows = read_csv(sweep / "0" / "csv" / "version_0" / "metrics.csv")
    epochs = json.loads((sweep / "0" / "metrics.json").read_text())["epochs"]
    during_fit = [r for r in rows if r["val/loss"] and int(r["epoch"]) < epochs]
    assert history(run, "val/loss") == {int(r["epoch"]): float(r["val/loss"]) for r in during_fit}
    assert sorted(history(run, "val/loss")) == list(range(int(TINY["trainer.max_epochs"])))


def _copy(src: Path, dst: Path) -> Path:
    return Path(shutil.copytree(src, dst, ignore=shutil.ignore_patterns("*.ckpt")))


@pytest.mark.slow
def test_failed_and_broken_jobs_are_listed_last(sweep, tmp_path, capsys):
    copy = _copy(sweep, tmp_path / "sweep")
    killed = copy / "2"  # a job killed before it wrote anything but Hydra's record
    shutil.copytree(copy / "1" / ".hydra", killed / ".hydra")
    broken = _copy(copy / "0", copy / "3")
    (broken / "metrics.json").write_text('{"metrics": {"val/loss": 1.0')  # cut mid-write
    alien = _copy(copy / "0", copy / "4")  # files of the right names, but not a run's
    (alien / "metrics.json").write_text("[1, 2]")
    (alien / "config.yaml").write_text("- a\n- list\n")
    failed = _copy(copy / "0", copy / "5")  # metrics.json written, then the job failed (exit 2)
    summary = json.loads((failed / "metrics.json").read_text())
    summary["metrics"]["best/val/loss"] = -1.0  # the best value of all: still listed after the ok jobs
    summary["failed"] = "optimized_metric 'val/x' was not reported by this run; it reported val/loss"
    (failed / "metrics.json").write_text(json.dumps(summary))
    main([str(copy)])
    rows = read_csv(copy / "report" / "report.csv")
    order = sorted(job_metrics(sweep), key=lambda j: job_metrics(sweep)[j]["best/val/loss"])
    assert [r["run"] for r in rows] == [*order, "2", "3", "4", "5"]
    assert rows[5]["status"] == f"failed: {summary['failed']}" and float(rows[5]["best/val/loss"]) == -1.0
    assert "no metrics.json" in rows[2]["status"] and "unreadable metrics.json" in rows[3]["status"]
    assert "unreadable config.yaml (a list, not a mapping)" in rows[4]["status"]
    assert "unreadable metrics.json (a JSON list, not an object)" in rows[4]["status"]
    assert rows[2]["val/loss"] == "" and rows[3]["val/loss"] == "" and rows[4]["val/loss"] == ""
    page = Page((copy / "report" / "report.html").read_text())
    assert page.rows["2"]["class"] == "bad" and page.rows["3"]["class"] == "bad"
    assert "no metrics.json" in capsys.readouterr().out


@pytest.mark.slow
def test_status_is_one_line_and_a_damaged_first_run_is_never_shown_best(sweep, tmp_path):
    """A multi-line YAML error filled eight table lines of the status column; a run with a damaged
    config.yaml that sorted first was bold in the terminal as the best, and then still sorted
    first, among the ok runs, by its metrics; "N with metrics" counted the ok runs."""
    from rich.console import Console

    from attnflow.viz.report_pages import print_table
    from attnflow.viz.runs import build

    copy = _copy(sweep, tmp_path / "sweep")
    (copy / "0" / "config.yaml").write_text("a: [1, 2\nb: c\n")
    summary = json.loads((copy / "0" / "metrics.json").read_text())
    summary["metrics"]["best/val/loss"] = -1.0  # the lowest best/val/loss: still after the ok run
    (copy / "0" / "metrics.json").write_text(json.dumps(summary))
    failed = _copy(copy / "1", copy / "2")
    summary = json.loads((failed / "metrics.json").read_text())
    summary["failed"] = "first line\nsecond line"
    (failed / "metrics.json").write_text(json.dumps(summary))
    main([str(copy), "-o", str(tmp_path / "rep")])
    rows = read_csv(tmp_path / "rep" / "report.csv")
    assert [(r["run"], r["status"]) for r in rows] == [
        ("1", "ok"), ("0", "unreadable config.yaml (expected ',' or ']', but got ':' at line 2, column 2)"),
        ("2", "failed: first line …")]
    page = Page((tmp_path / "rep" / "report.html").read_text())
    assert [page.rows[n]["class"] for n in "012"] == ["bad", "best", "bad"]
    assert "- 3 run(s): 1 ok, 3 with metrics" in (tmp_path / "rep" / "report.md").read_text()
    out = io.StringIO()
    print_table(build(copy), Console(file=out, force_terminal=True, color_system="standard", width=400))
    lines = {re.sub(r"\x1b\[[0-9;]*m", "", line).split()[1]: line
             for line in out.getvalue().splitlines() if line.startswith("│")}
    assert set(lines) == {"0", "1", "2"}  # one line each
    assert [n for n, line in lines.items() if "\x1b[1m" in line] == ["1"]  # the ok run alone is bold
    assert "\x1b[31m" in lines["0"] and "\x1b[31m" in lines["2"] and "\x1b[31m" not in lines["1"]


@pytest.mark.slow
def test_single_run_directory(sweep, tmp_path, capsys):
    run = _copy(sweep / "0", tmp_path / "run")
    jobs = job_metrics(sweep)
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    cfg["optimized_metric"] = None  # then the task's checkpoint metric sorts (README: val/seq_acc)
    (run / "config.yaml").write_text(yaml.safe_dump(cfg))
    main([str(run)])
    (row,) = read_csv(run / "report" / "report.csv")
    assert row["run"] == "run" and row["status"] == "ok" and row["scorer"] == "dot"
    assert row["data.train_size"] == TINY["data.train_size"]  # a single run shows all its overrides
    assert {k: float(row[k]) for k in jobs["0"]} == jobs["0"]
    assert [k for k in row if k in jobs["0"]][0] == "best/val/seq_acc"  # the sort metric comes first
    assert "best/val/seq_acc (higher is better" in (run / "report" / "report.html").read_text()
    # its attention pictures (whatever the callback wrote, and one more): thumbnails, linked
    from PIL import Image

    (run / "attention").mkdir(exist_ok=True)
    Image.new("RGB", (800, 600), (200, 30, 30)).save(run / "attention" / "zz_extra.png")
    main([str(run), "-o", str(tmp_path / "rep")])
    pictures = sorted((run / "attention").glob("*.png"))[:4]
    alts = [i["alt"] for i in Page((tmp_path / "rep" / "report.html").read_text()).imgs]
    assert [a for a in alts if a.startswith("attention: ")] == [f"attention: run/{p.name}" for p in pictures]
    thumb = tmp_path / "rep" / "attention" / "run" / "zz_extra.png"
    with Image.open(thumb) as im:
        assert im.size == (360, 270)  # shrunk, aspect kept
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "[![zz_extra.png](attention/run/zz_extra.png)](../run/attention/zz_extra.png)" in md


@pytest.mark.slow
def test_a_folder_of_runs_is_runs_not_a_sweep_and_different_experiments_rank_within_each(sweep, tmp_path,
                                                                                           capsys):
    """outputs/<date>/ (runs started one by one, no multirun.yaml) was labelled "sweep:", and runs
    of different experiments were sorted together by the first run's metric; then they were listed
    unranked; now each experiment's runs are ranked on their own, as a sweep's jobs are."""
    day = tmp_path / "day"
    for job, time in (("1", "10-00-00"), ("0", "11-00-00")):
        _copy(sweep / job, day / time)
    jobs = job_metrics(sweep)
    main([str(day), "-o", str(tmp_path / "same")])  # one experiment: ranked as a sweep would be
    md = (tmp_path / "same" / "report.md").read_text()
    assert md.splitlines()[2] == f"- runs: {day}" and "- sweep:" not in md
    times = {"1": "10-00-00", "0": "11-00-00"}
    best = [times[j] for j in sorted(jobs, key=lambda j: jobs[j]["best/val/loss"])]
    assert [r["run"] for r in read_csv(tmp_path / "same" / "report.csv")] == best
    assert Page((tmp_path / "same" / "report.html").read_text()).rows[best[0]]["class"] == "best"
    graph = day / "12-00-00"  # another experiment's run, whose val/loss is lower than any; its
    # metrics.json is as runs wrote it before best/val/…: its val/… are the best checkpoint's
    graph.mkdir()
    (graph / "config.yaml").write_text(yaml.safe_dump(
        {"task": {"name": "node_classification"}, "data": {"name": "planetoid", "dataset": "Cora"}}))
    (graph / "metrics.json").write_text(json.dumps({"metrics": {"val/acc": 0.8, "val/loss": 0.01}}))
    (day / "13-00-00" / ".hydra").mkdir(parents=True)  # a run killed at its start: listed last
    capsys.readouterr()
    main([str(day), "-o", str(tmp_path / "mixed")])
    rows = read_csv(tmp_path / "mixed" / "report.csv")
    assert [(r["run"], r["group"]) for r in rows] == [(best[0], "A"), (best[1], "A"), ("12-00-00", "B"),
                                                       ("13-00-00", "")]  # (killed at its start: last)
    md = (tmp_path / "mixed" / "report.md").read_text()
    assert ("- ranked within each experiment, best first: A = task seq2seq on reverse data, by "
            "best/val/loss (lower is better): 10-00-00, 11-00-00; B = task node_classification on "
            "planetoid Cora data, by best/val/acc (higher is better): 12-00-00") in md
    assert "note: the runs are of different experiments, whose values do not compare" in md
    page = Page((tmp_path / "mixed" / "report.html").read_text())
    assert {n for n, row in page.rows.items() if row["class"] == "best"} == {best[0], "12-00-00"}
    assert not list((tmp_path / "mixed").glob("*_vs_*.png"))  # no metric against a parameter
    assert "ranked within each experiment" in capsys.readouterr().out
    main([str(day), "--metric", "val/loss", "-o", str(tmp_path / "asked")])  # sorted as asked, noted
    rows = read_csv(tmp_path / "asked" / "report.csv")
    assert [r["run"] for r in rows] == ["12-00-00", *best, "13-00-00"]
    assert "sorted by best/val/loss (--metric) as asked, though their values may not compare" in \
        (tmp_path / "asked" / "report.md").read_text()


@pytest.mark.slow
def test_a_sweep_over_experiments_is_ranked_within_each(sweep, tmp_path, capsys):
    """-m experiment=…/data=… : a sweep folder was ranked as one sweep by the first job's metric,
    even where its jobs ran different tasks or data, whose values do not compare."""
    copy = _copy(sweep, tmp_path / "sweep")
    jobs = job_metrics(sweep)
    for job, acc in (("2", 0.6), ("3", 0.8)):  # jobs of a GAT experiment, lower val/loss than any
        (copy / job / ".hydra").mkdir(parents=True)
        (copy / job / ".hydra" / "overrides.yaml").write_text("- experiment=gat_cora\n")
        (copy / job / "config.yaml").write_text(yaml.safe_dump(
            {"task": {"name": "node_classification"}, "data": {"name": "planetoid", "dataset": "Cora"}}))
        (copy / job / "metrics.json").write_text(json.dumps({"metrics": {"val/acc": acc, "val/loss": 0.01}}))
    (copy / "4" / ".hydra").mkdir(parents=True)  # a job killed at its start: last
    capsys.readouterr()
    main([str(copy), "-o", str(tmp_path / "rep")])
    seq = sorted(("0", "1"), key=lambda j: jobs[j]["best/val/loss"])  # optimized_metric=val/loss
    rows = read_csv(tmp_path / "rep" / "report.csv")
    assert [(r["run"], r["group"]) for r in rows] == [(seq[0], "A"), (seq[1], "A"), ("3", "B"),
                                                       ("2", "B"), ("4", "")]
    md = (tmp_path / "rep" / "report.md").read_text()
    assert ("- ranked within each experiment, best first: A = task seq2seq on reverse data, by "
            "best/val/loss (lower is better): 0, 1; B = task node_classification on planetoid Cora data, "
            "by best/val/acc (higher is better): 2, 3") in md
    page = Page((tmp_path / "rep" / "report.html").read_text())
    assert {n for n, row in page.rows.items() if row["class"] == "best"} == {seq[0], "3"}
    assert not list((tmp_path / "rep").glob("*_vs_*.png"))  # no one metric against a parameter
    assert "ranked within each experiment" in capsys.readouterr().out
    main([str(copy), "--metric", "val/loss", "-o", str(tmp_path / "asked")])  # one metric, as asked
    assert [r["run"] for r in read_csv(tmp_path / "asked" / "report.csv")][:3] == ["2", "3", seq[0]]
    assert "though their values may not compare" in (tmp_path / "asked" / "report.md").read_text()


def test_a_sweep_whose_sweeper_writes_no_multirun_yaml_is_a_sweep(sweep, tmp_path):
    """hydra-optuna-sweeper writes no multirun.yaml: its sweep folder was reported as "runs:",
    its sweeper (name, direction, storage) unread; its jobs' own .hydra/hydra.yaml record it."""
    copy = _copy(sweep, tmp_path / "sweep")
    (copy / "multirun.yaml").unlink()
    record = copy / "0" / ".hydra" / "hydra.yaml"
    hydra = yaml.safe_load(record.read_text())
    assert hydra["hydra"]["mode"] == "MULTIRUN" and hydra["hydra"]["job"]["num"] == 0  # as Hydra wrote it
    hydra["hydra"]["sweeper"] = {"_target_": "hydra_plugins.hydra_optuna_sweeper.optuna_sweeper.OptunaSweeper",
                                 "direction": "minimize", "storage": None, "n_trials": 2}
    record.write_text(yaml.safe_dump(hydra))
    main([str(copy), "-o", str(tmp_path / "rep")])
    md = (tmp_path / "rep" / "report.md").read_text()
    assert md.splitlines()[2:4] == [f"- sweep: {copy}", "- 2 run(s): 2 ok, 2 with metrics; sweeper: OptunaSweeper"]
    assert "the study was kept in memory" in md  # the Optuna sweep's note, where no storage was kept


@pytest.mark.slow
def test_optuna_sweep_history_and_importances(tmp_path):
    values = [(0.1, "gru", 0.7), (0.001, "lstm", 0.2), (0.01, "gru", 0.4), (0.0003, "lstm", 0.5)]
    folder = optuna_sweep_folder(tmp_path / "optuna", values)
    db = hashlib.sha256((folder / "optuna.db").read_bytes()).hexdigest()
    main([str(folder), "-o", str(tmp_path / "rep")])
    # direction "minimize" from the sweeper (a name like val/score says nothing about it)
    expected = [str(i) for i in sorted(range(len(values)), key=lambda i: values[i][2])]
    rows = read_csv(tmp_path / "rep" / "report.csv")
    assert [r["run"] for r in rows] == expected
    assert [float(r["task.optim.lr"]) for r in rows] == [values[int(i)][0] for i in expected]
    page = Page((tmp_path / "rep" / "report.html").read_text())
    alts = {i["alt"] for i in page.imgs}
    assert {"Optuna: optimisation history", "Optuna: parameter importances",
            "best/val/score against task.optim.lr", "best/val/score against model.cell"} <= alts
    assert hashlib.sha256((folder / "optuna.db").read_bytes()).hexdigest() == db  # read, not written


@pytest.mark.slow
def test_optuna_notes_when_history_or_importances_cannot_be_drawn(tmp_path):
    one = optuna_sweep_folder(tmp_path / "one", [(0.1, "gru", 0.7)])
    main([str(one), "-o", str(tmp_path / "rep1")])
    text = (tmp_path / "rep1" / "report.html").read_text()
    assert "Optuna: optimisation history" in text and "no parameter importances (1 completed" in text
    gone = optuna_sweep_folder(tmp_path / "gone", [(0.1, "gru", 0.7), (0.01, "lstm", 0.3)], storage=False)
    main([str(gone), "-o", str(tmp_path / "rep2")])
    text = (tmp_path / "rep2" / "report.html").read_text()
    assert "no Optuna storage (optuna.db)" in text and "Optuna: optimisation history" not in text


def test_unknown_metric_is_refused_naming_the_metrics(sweep, capsys):
    with pytest.raises(SystemExit) as exc:
        main([str(sweep), "--metric", "val/seq_ac", "-o", str(sweep / "never")])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--metric 'val/seq_ac'" in err and ", ".join(sorted(job_metrics(sweep)["0"])) in err
    assert not (sweep / "never").exists()
    with pytest.raises(SystemExit) as exc:  # refused, not read as 0
        main([str(sweep), "--pictures", "-1", "-o", str(sweep / "never")])
    assert exc.value.code == 2 and "--pictures must be >= 0, got -1" in capsys.readouterr().err
    assert not (sweep / "never").exists()


@pytest.mark.slow
def test_a_metric_is_ranked_in_the_direction_its_task_declares(sweep, tmp_path):
    """--metric val/penalty (or an optimized_metric=val/penalty sweep): the task declares it 'min',
    but its name says nothing, and the report ranked the highest penalty first."""
    copy = _copy(sweep, tmp_path / "sweep")
    for job, penalty in (("0", 0.2), ("1", 0.5)):
        summary = json.loads((copy / job / "metrics.json").read_text())
        summary["metrics"]["best/val/penalty"] = penalty
        (copy / job / "metrics.json").write_text(json.dumps(summary))
    main([str(copy), "--metric", "val/penalty", "-o", str(tmp_path / "rep")])
    assert [r["run"] for r in read_csv(tmp_path / "rep" / "report.csv")] == ["0", "1"]
    assert "sorted by best/val/penalty (lower is better; from --metric)" in (tmp_path / "rep" / "report.md").read_text()


@pytest.mark.slow
def test_a_metric_no_run_reports_is_refused_also_where_no_run_has_metrics(sweep, tmp_path, capsys):
    """--metric X over runs none of which had a metrics.json was accepted: a table "sorted by" X
    and exit 0. Where some runs report it, the others are listed after them."""
    copy = _copy(sweep, tmp_path / "sweep")
    (copy / "1" / "metrics.json").unlink()  # job 1 killed: job 0 reports val/loss, that is enough
    main([str(copy), "--metric", "val/loss", "-o", str(tmp_path / "rep")])
    rows = read_csv(tmp_path / "rep" / "report.csv")
    assert [(r["run"], r["status"]) for r in rows] == [("0", "ok"), ("1", MISSING)]
    (copy / "0" / "metrics.json").unlink()
    for path in (copy, copy / "0"):  # the sweep, and one run
        with pytest.raises(SystemExit) as exc:
            main([str(path), "--metric", "val/loss", "-o", str(tmp_path / "never")])
        assert exc.value.code == 2
        assert capsys.readouterr().err == (
            f"attnflow-report: --metric 'val/loss': no run in '{path}' reports any metric "
            f"(its {2 if path == copy else 1} run(s): {MISSING}); leave --metric out to list the "
            f"runs with their status\n")
        assert not (tmp_path / "never").exists()
    empty = tmp_path / "empty"  # a sweep that has started no job
    empty.mkdir()
    (empty / "multirun.yaml").write_text("hydra: {}\n")
    with pytest.raises(SystemExit):
        main([str(empty), "--metric", "val/loss", "-o", str(tmp_path / "never")])
    assert "reports any metric (it holds no job's run yet)" in capsys.readouterr().err
    main([str(copy), "-o", str(tmp_path / "rep2")])  # without --metric: listed with their status
    assert [r["status"] for r in read_csv(tmp_path / "rep2" / "report.csv")] == [MISSING, MISSING]


def _files(folder: Path) -> dict:
    return {p.relative_to(folder): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.slow
def test_a_report_overwrites_nothing_but_an_earlier_report_of_the_same_path(sweep, tmp_path, capsys):
    """Running the command again refreshes the report (its default folder, or the -o of the same
    path); a folder of other files — a run's folder, another path's report, a file — is refused
    before anything is written, and keeps every byte."""
    runs = {n: _copy(sweep / n, tmp_path / f"run{n}") for n in ("0", "1")}
    main([str(runs["0"])])
    first = (runs["0"] / "report" / "report.csv").read_text()
    (runs["0"] / "report" / "report.csv").write_text("stale")
    main([str(runs["0"])])  # again: refreshed
    assert (runs["0"] / "report" / "report.csv").read_text() == first
    (runs["0"] / "report" / ".report-of").unlink()  # a report made before the record existed
    main([str(runs["0"])])
    main([str(runs["0"]), "-o", str(tmp_path / "rep")])
    main([str(runs["0"]), "-o", str(tmp_path / "rep")])  # the same -o, the same path: refreshed
    capsys.readouterr()

    (tmp_path / "a_file").write_text("keep me")
    refusals = [(runs["0"] / "report", runs["1"], "holds the report of"),  # another path's report
                (runs["1"], runs["0"], "holds other files (.hydra, attention, checkpoints, config.yaml"),
                (tmp_path / "rep", runs["1"], "holds the report of"),
                (tmp_path / "a_file", runs["0"], "is a file")]
    for out, source, says in refusals:
        before = _files(out) if out.is_dir() else out.read_bytes()
        with pytest.raises(SystemExit) as exc:
            main([str(source), "-o", str(out)])
        assert exc.value.code == 2
        err = capsys.readouterr().err
        assert says in err and f"'{out}'" in err, err
        assert (_files(out) if out.is_dir() else out.read_bytes()) == before
    main([str(runs["1"]), "-o", str(tmp_path / "empty")])  # new: written
    assert (tmp_path / "empty" / ".report-of").read_text().strip() == str(runs["1"].resolve())
    moved = tmp_path / "moved"  # a run moved (or copied) with its report refreshes it in place
    shutil.move(runs["0"], moved)
    main([str(moved)])
    assert (moved / "report" / ".report-of").read_text().strip() == str(moved.resolve())


def test_an_output_under_a_file_is_refused_before_the_runs_are_read(tmp_path, capsys, monkeypatch):
    """-o notes.txt/rep was refused only when the report was written (after the runs were read),
    with mkdir's "Not a directory" that did not say which part is a file."""
    import attnflow.cli.report as report_mod

    run, notes = tmp_path / "run", tmp_path / "notes.txt"
    run.mkdir()
    (run / "config.yaml").write_text("seed: 1\n")
    notes.write_text("keep me")
    monkeypatch.setattr(report_mod, "build", lambda *a, **k: pytest.fail("the runs were read"))
    for out in (notes / "rep", notes / "a" / "rep"):
        with pytest.raises(SystemExit) as exc:
            main([str(run), "-o", str(out)])
        assert exc.value.code == 2
        assert capsys.readouterr().err == (f"attnflow-report: -o '{out}': {notes} is a file, not a "
                                           f"folder; name a folder for the report\n")
    assert notes.read_text() == "keep me" and sorted(p.name for p in tmp_path.rglob("*")) == [
        "config.yaml", "notes.txt", "run"]


@pytest.mark.parametrize("kind", ["missing", "file", "empty", "parent"])
def test_bad_paths_exit_2_naming_the_path(tmp_path, capsys, kind):
    path = tmp_path / "x"
    if kind == "file":
        path.write_text("not a run")
    elif kind in ("empty", "parent"):
        path.mkdir()
    if kind == "parent":  # a date folder holding sweeps: say which to report
        (path / "10-00-00").mkdir()
        (path / "10-00-00" / "multirun.yaml").write_text("hydra: {}\n")
    with pytest.raises(SystemExit) as exc:
        main([str(path)])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert f"'{path}'" in err
    assert {"missing": "does not exist", "file": "is a file", "empty": "multirun.yaml",
            "parent": "report one of them: " + str(path / "10-00-00")}[kind] in err
    assert not (path / "report").exists()


def test_a_run_is_ranked_by_its_result_and_an_older_metrics_json_is_read_as_written(tmp_path):
    """metrics.json's val/x is the last epoch's, best/val/x the best checkpoint's (the result the
    runs are ranked by); one written before best/val/… (no best/ key) held the best checkpoint's
    figures as val/x, and is read so."""
    from attnflow.viz.runs import build, table

    runs = tmp_path / "runs"
    written = {"new": {"val/loss": 0.1, "best/val/loss": 0.4, "test/loss": 0.5},
               "old": {"val/loss": 0.2, "test/loss": 0.3}}
    for name, metrics in written.items():
        (runs / name).mkdir(parents=True)
        (runs / name / "config.yaml").write_text("task: {name: seq2seq}\ndata: {name: reverse}\n")
        (runs / name / "metrics.json").write_text(json.dumps({"metrics": metrics, "epochs": 2}))
    report = build(runs, metric="val/loss")
    assert report.metric == "best/val/loss" and not report.maximize
    header, rows = table(report, full=True)
    got = {row[0]: {k: v for k, v in zip(header, row) if "/" in k and v is not None} for row in rows}
    assert list(got) == ["old", "new"]  # 0.2 before 0.4: by the result, not the last epoch's 0.1
    assert got == {"old": {"best/val/loss": 0.2, "test/loss": 0.3}, "new": written["new"]}
    assert header.index("best/val/loss") < header.index("test/loss") < header.index("val/loss")


def test_a_folder_without_config_and_metrics_is_not_a_run(tmp_path, capsys):
    """A folder whose metrics.json is `{}` and that has no config was listed as a run, "ok":
    given itself, it is refused; among runs, it is listed last as "not a run"."""
    runs = tmp_path / "runs"
    real, alien = runs / "a", runs / "b"
    for d in (real, alien):
        d.mkdir(parents=True)
        (d / "metrics.json").write_text("{}")
    empty = runs / "c"  # a run's config, but metrics.json `{}`: not "ok" either
    shutil.copytree(alien, empty)
    for d in (real, empty):
        (d / "config.yaml").write_text("seed: 1\n")
    (real / "metrics.json").write_text(json.dumps({"metrics": {"val/loss": 0.5}}))
    with pytest.raises(SystemExit) as exc:
        main([str(alien)])
    assert exc.value.code == 2 and not (alien / "report").exists()
    assert capsys.readouterr().err == (
        f"attnflow-report: '{alien}' is {NOT_A_RUN}; name a run directory (attnflow-train "
        f"writes config.yaml as it starts) or a multirun directory\n")
    main([str(runs)])
    rows = read_csv(runs / "report" / "report.csv")
    assert [(r["run"], r["status"]) for r in rows] == [("a", "ok"), ("c", "metrics.json holds no metrics"),
                                                       ("b", NOT_A_RUN)]
    assert NOT_A_RUN == "not a run: no config.yaml (nor .hydra/config.yaml) and no metrics"


@pytest.mark.slow
@pytest.mark.skipif(not CHROMIUM.exists(), reason=CHROMIUM_MISSING)
def test_page_renders_in_headless_chromium(sweep_report, tmp_path):
    """The images load; each plot shows at its own size, inside the window (a legend beside the
    axes is neither shrunk nor cut off): the screenshot holds its PNG's pixels."""
    from PIL import Image

    out, _ = sweep_report
    imgs = Page((out / "report.html").read_text()).imgs
    n_imgs = len(imgs)
    # a copy of the page with a probe: the report itself has no script
    probe = ("<script>addEventListener('load', () => { const im = [...document.images];"
             "document.body.dataset.images = im.length;"
             "document.body.dataset.loaded = im.filter(i => i.complete && i.naturalWidth > 0).length;"
             f"{PLOT_BOXES_PROBE}}});</script></body>")
    window = "--window-size=1200,2000"
    dom = chromium_dom(out / "report.html", probe, tmp_path, window, "--hide-scrollbars")
    assert f'data-images="{n_imgs}"' in dom and f'data-loaded="{n_imgs}"' in dom, dom[:500]
    shot = tmp_path / "shot.png"
    subprocess.run([*chromium_flags(tmp_path), f"--screenshot={shot}", window, "--hide-scrollbars",
                    (out / "report.html").as_uri()], capture_output=True, timeout=120, check=True)
    with Image.open(shot) as im:
        gray = im.convert("L")
        assert gray.size == (1200, 2000)
        dark = sum(gray.histogram()[:200]) / (gray.size[0] * gray.size[1])
        colours = len(im.convert("RGB").getcolors(maxcolors=1 << 20) or [])
    assert dark > 0.01 and colours > 50, (dark, colours)  # text, table and plots drawn, not blank
    shown = plots_in_screenshot(shot, re.search(r'data-plots="([^"]*)"', dom).group(1), imgs)
    assert shown and all(diff < 4 for _, diff in shown), shown
