"""attnflow-report over runs of several tasks (a folder of runs written here, as attnflow-train
leaves them: config.yaml, .hydra/overrides.yaml, metrics.json, a CSV history): each task's runs
get a table of their own with only their metrics, and learning curves of their own whose legend
names them; the page fits a 1,400 px window in headless Chromium (no horizontal scroll, nothing
drawn into the right margin of the screenshot)."""

from __future__ import annotations

import json
import re
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
import yaml
from PIL import Image

import attnflow.viz.report_plots as report_plots
from attnflow.cli.report import main
from attnflow.config.registry import TASKS
from support import CHROMIUM, CHROMIUM_MISSING, chromium_dom, chromium_flags

# task -> {run folder: its overrides}: a translation sweep and a tagging sweep, in one folder
RUNS = {"translation": {"10-00-00": ["scorer=dot", "model.decoder.hidden_dim=64"],
                        "10-30-00": ["scorer=general", "model.decoder.hidden_dim=64"],
                        "11-00-00": ["scorer=additive", "model.decoder.hidden_dim=128"]},
        "token_classification": {"12-00-00": ["task.optim.lr=0.0003", "data.max_len=128"],
                                 "12-30-00": ["task.optim.lr=0.001", "data.max_len=256"]}}
DATA = {"translation": "parallel", "token_classification": "token_classification"}
EPOCHS = 3
WINDOW = 1400


def _write_run(folder: Path, task: str, overrides: list, seed: int) -> None:
    """A finished run of ``task``: every final metric its task class logs on val and test, and
    its validation metrics per epoch in csv/version_0/metrics.csv."""
    (folder / ".hydra").mkdir(parents=True)
    (folder / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides))
    (folder / "config.yaml").write_text(yaml.safe_dump({"task": {"name": task}, "data": {"name": DATA[task]}}))
    names = TASKS.get(task).metric_names(("val", "test"))
    metrics = {m: round(0.1 + 0.8 * ((seed * 7 + i * 3) % 11) / 11, 6) for i, m in enumerate(names)}
    val = [m for m in names if m.startswith("val/")]
    curve = {e: {m: round(metrics[m] * (1 + (EPOCHS - e) / 10), 6) for m in val} for e in range(EPOCHS)}
    written = {**{f"best/{m}" if m in val else m: v for m, v in metrics.items()}, **curve[EPOCHS - 1]}
    (folder / "metrics.json").write_text(json.dumps({"metrics": written, "epochs": EPOCHS,
                                                     "global_step": 300, "fit_seconds": 12.5}))
    rows = [",".join(["epoch", *val])] + [",".join([str(e), *(str(curve[e][m]) for m in val)])
                                          for e in range(EPOCHS)]
    (folder / "csv" / "version_0").mkdir(parents=True)
    (folder / "csv" / "version_0" / "metrics.csv").write_text("\n".join(rows) + "\n")


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    day = tmp_path_factory.mktemp("day")
    for seed, (task, name, overrides) in enumerate((t, n, o) for t, named in RUNS.items() for n, o in named.items()):
        _write_run(day / name, task, overrides, seed)
    return day


class Tables(HTMLParser):
    """Each <table>'s id, the <h3> heading above it, header cells and rows (run → cells), and
    each plot's alt text."""

    def __init__(self, text: str):
        super().__init__()
        self.tables, self.plots, self.heading = [], [], ""
        self._cell = self._row = self._h3 = None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "table":
            self.tables.append({"id": a.get("id"), "section": self.heading, "header": [], "rows": {}})
        elif tag == "tr" and "data-run" in a:
            self._row = self.tables[-1]["rows"].setdefault(a["data-run"], [])
        elif tag in ("td", "th"):
            self._cell = ""
        elif tag == "h3":
            self._h3 = ""
        elif tag == "img" and a.get("class") == "plot":
            self.plots.append(a["alt"])

    def handle_data(self, data):
        if self._cell is not None:
            self._cell += data
        if self._h3 is not None:
            self._h3 += data

    def handle_endtag(self, tag):
        if tag == "th":
            self.tables[-1]["header"].append(self._cell)
        elif tag == "td" and self._row is not None:
            self._row.append(self._cell)
        elif tag == "tr":
            self._row = None
        elif tag == "h3":
            self.heading, self._h3 = self._h3, None
        if tag in ("td", "th"):
            self._cell = None


def _report(runs: Path, out: Path, monkeypatch, *args: str) -> dict:
    """Report ``runs`` into ``out``; the learning-curve figures drawn, by file name."""
    drawn, save = {}, report_plots.save_png

    def keep(fig, folder, name):
        drawn[name] = fig
        return save(fig, folder, name)
    monkeypatch.setattr(report_plots, "save_png", keep)
    main([str(runs), "-o", str(out), *args])
    return {name: fig for name, fig in drawn.items() if name.startswith("curves_")}


def _check_tables(page: Tables, runs: Path, titles: dict) -> None:
    """Under each task's heading its runs, and as columns only its own metrics (each once) and
    swept parameters; each run's values those of its metrics.json."""
    assert sorted({t["section"] for t in page.tables}) == sorted(titles.values())
    for task, named in RUNS.items():
        tables = [t for t in page.tables if t["section"] == titles[task]]
        assert tables and all(sorted(t["rows"]) == sorted(named) for t in tables), titles[task]
        names = TASKS.get(task).metric_names(("val", "test"))  # (best/val/…: the result's)
        metrics = [*names, *(f"best/{m}" for m in names if m.startswith("val/"))]
        columns = [h for t in tables for h in t["header"] if h.split("/")[0] in ("best", "val", "test")]
        assert sorted(columns) == sorted(metrics), (task, columns)
        params = {o.split("=")[0] for overrides in named.values() for o in overrides}
        others = {o.split("=")[0] for t, n in RUNS.items() if t != task for os_ in n.values() for o in os_}
        for table in tables:
            assert table["header"][:2 + len(params)] == ["run", "status", *sorted(params, key=table["header"].index)]
            assert not others & set(table["header"]), (task, table["header"])
        for name in named:
            shown = {h: c for t in tables for h, c in zip(t["header"], t["rows"][name])}
            summary = json.loads((runs / name / "metrics.json").read_text())["metrics"]
            assert {m: float(shown[m]) for m in metrics} == pytest.approx(
                {m: float(f"{summary[m]:.4g}") for m in metrics})
            assert {p: shown[p] for p in params} == dict(o.split("=") for o in RUNS[task][name])


def _check_curves(page: Tables, drawn: dict, titles: dict, metrics: dict) -> None:
    """Per task, its learning curves (``metrics[task]``), each legend naming its runs and no
    other; no curve plot over runs of several tasks."""
    curves = [alt for alt in page.plots if alt.startswith("learning curves:")]
    assert len(curves) == len(drawn) == sum(map(len, metrics.values())), (curves, sorted(drawn))
    for task, named in RUNS.items():
        mine = [alt for alt in curves if alt.endswith(titles[task])]
        assert sorted(a.split(":")[1].split(" — ")[0].strip() for a in mine) == sorted(metrics[task]), mine
        figures = [f for name, f in drawn.items() if task in name]
        assert len(figures) == len(metrics[task]), sorted(drawn)
        for fig in figures:
            legend = fig.axes[0].get_legend()
            shown = sorted(t.get_text().split(" ")[0] for t in legend.get_texts())
            assert shown == sorted(named), (task, shown)
            params = {o.split("=")[0] for t, n in RUNS.items() if t != task for os_ in n.values() for o in os_}
            assert not any(p in t.get_text() for t in legend.get_texts() for p in params)


@pytest.mark.slow
def test_runs_of_two_tasks_get_a_table_and_curves_each(runs, tmp_path, monkeypatch):
    drawn = _report(runs, tmp_path / "rep", monkeypatch)
    page = Tables((tmp_path / "rep" / "report.html").read_text())
    titles = {"translation": "A: task translation on parallel data",
              "token_classification": "B: task token_classification on token_classification data"}
    _check_tables(page, runs, titles)
    _check_curves(page, drawn, titles, {t: {"val/loss", TASKS.get(t).monitor} for t in RUNS})
    md = (tmp_path / "rep" / "report.md").read_text()
    assert [line[4:] for line in md.splitlines() if line.startswith("### ")] == list(titles.values())
    # sorted as one by --metric: still a table and curves per task
    drawn = _report(runs, tmp_path / "asked", monkeypatch, "--metric", "val/loss")
    page = Tables((tmp_path / "asked" / "report.html").read_text())
    _check_tables(page, runs, {t: f"task {t}" for t in RUNS})
    _check_curves(page, drawn, {t: f"task {t}" for t in RUNS}, {t: {"val/loss"} for t in RUNS})


# JavaScript for chromium_dom: the document's scroll width and each table's right edge
WIDTH_PROBE = ("<script>addEventListener('load', () => { const b = document.body.dataset;"
               "b.scroll = document.documentElement.scrollWidth;"
               "b.tables = [...document.querySelectorAll('table')].map(t => { const r = t.getBoundingClientRect();"
               "return [r.left, r.top, r.right, r.bottom].map(Math.round).join(','); }).join(';'); });"
               "</script></body>")


@pytest.mark.slow
@pytest.mark.skipif(not CHROMIUM.exists(), reason=CHROMIUM_MISSING)
def test_a_report_of_two_tasks_fits_a_1400_px_window(runs, tmp_path, monkeypatch):
    _report(runs, tmp_path / "rep", monkeypatch)
    page = tmp_path / "rep" / "report.html"
    window = f"--window-size={WINDOW},2400"
    dom = chromium_dom(page, WIDTH_PROBE, tmp_path, window, "--hide-scrollbars")
    scroll = int(re.search(r'data-scroll="(\d+)"', dom).group(1))
    tables = [tuple(map(int, t.split(","))) for t in re.search(r'data-tables="([^"]*)"', dom).group(1).split(";")]
    assert scroll <= WINDOW and len(tables) >= len(RUNS), (scroll, tables)
    assert all(0 <= left and right <= WINDOW for left, _, right, _ in tables), tables
    shot = tmp_path / "shot.png"
    subprocess.run([*chromium_flags(tmp_path), f"--screenshot={shot}", window, "--hide-scrollbars",
                    page.as_uri()], capture_output=True, timeout=120, check=True)
    with Image.open(shot) as im:
        pixels = np.asarray(im.convert("L"))
    assert pixels.shape == (2400, WINDOW)
    drawn = np.nonzero((pixels < 250).any(axis=0))[0]
    assert drawn.size and drawn.max() < WINDOW - 16, drawn.max()  # the right margin is blank
    for _, top, right, bottom in tables:  # each table's right border is drawn, inside the window
        column = pixels[top + 2:min(bottom, pixels.shape[0]) - 2, right - 1]
        assert column.size and (column < 230).mean() > 0.9, (right, column[:10])
