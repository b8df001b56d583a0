"""The comparison as one self-contained HTML page (pictures inline), and its figures as JSON and
CSV: the statistics table, Jain & Wallace's diagnostics, AER, then each example's attention in
every run side by side (one row an example, one column a run)."""

from __future__ import annotations

import base64
import csv
import html
import io
from pathlib import Path
from typing import Dict, List, Sequence

from rich.console import Console
from rich.table import Table

from attnflow.compare.comparison import Comparison, fmt
from attnflow.compare.stats import MEAN
from attnflow.io.text import InputError, write_json, write_text

STYLE = """<style>
body{font-family:system-ui,sans-serif;margin:1.5em;line-height:1.45;color:#222}
table{border-collapse:collapse;font-size:.85em;margin:.6em 0}
td,th{border:1px solid #ddd;padding:.2em .5em;text-align:right}th{background:#f4f4f4}
td.l,th.l{text-align:left}.note{color:#555;font-size:.9em;max-width:70em}
.grid{display:grid;gap:.6em;align-items:start;margin:.8em 0 1.6em}
.cell{border:1px solid #ccc;border-radius:6px;padding:.4em}.cell img{width:100%;height:auto}
.cell .who{font-weight:600}.cell .cap{color:#555;font-size:.8em}.ex{margin-top:1.2em}
</style>"""

NOTE = ("Each figure is the mean over every row of the compared examples: a row is one query's "
        "weights (an output word, a sentence, a node, ⟨CLS⟩). Entropy in bits against the uniform "
        "distribution's over the same columns (H / uniform: 1 uniform, 0 one column); the largest "
        "weight; diagonality 1 − Σ α_ij |i/I − j/J| (translation); JS: the Jensen–Shannon divergence "
        "from the other run's rows of the same examples, in bits (0 the same, 1 disjoint).")
JW_NOTE = ("Jain & Wallace (2019): Kendall τ between the attention and the gradient importance of "
           "the inputs, and the total variation distance of the output when the attention is "
           "randomly permuted (median over permutations, then over examples). A small τ and a small "
           "TVD: the attention does not say what the output depends on.")


def _table(columns: List[str], rows: List[List], left: Sequence[int] = (0,)) -> str:
    """An HTML table, the columns at ``left`` aligned left (names), the others right (figures)."""
    def line(tag: str, cells) -> str:
        return "<tr>" + "".join(f'<{tag} class="{"l" if i in left else ""}">{html.escape(text)}</{tag}>'
                                for i, text in enumerate(cells)) + "</tr>"

    return f"<table>{line('th', columns)}{''.join(line('td', map(fmt, r)) for r in rows)}</table>"


def diagnostics_rows(c: Comparison) -> List[List]:
    """Per run: Kendall τ, TVD, what was permuted (classifiers), AER (translation with gold)."""
    rows = []
    for label in c.labels:
        jw = c.diagnostics.get(label) or {}
        rows.append([label, jw.get("kendall_tau"), jw.get("tvd"), jw.get("permuted", ""),
                     c.alignment.get(label)])
    return rows


DIAG_COLUMNS = ["run", "Kendall τ (median)", "TVD permuted (median)", "permuted", "AER"]


def _any_figure(rows: List[List]) -> bool:
    """Whether any run has a diagnostic (classifiers, translation with gold alignments)."""
    return any(v not in (None, "") for r in rows for v in r[1:])


def _examples(c: Comparison) -> str:
    n = len(c.labels)
    parts = []
    for i, key in enumerate(c.keys()):
        first = c.examples[c.labels[0]][i]
        cells = []
        for label in c.labels:
            ex = c.examples[label][i]
            img = (f'<img alt="{html.escape(label)}: {html.escape(key)}" src="data:image/png;base64,'
                   f'{base64.b64encode(ex.picture).decode("ascii")}">' if ex.picture
                   else "<em>no attention</em>")
            cells.append(f'<div class="cell"><div class="who">{html.escape(label)}</div>'
                         f'<div class="cap">{html.escape(ex.prediction)}</div>{img}'
                         f'<div class="cap">{html.escape(ex.caption)}</div></div>')
        parts.append(f'<h3 class="ex">{html.escape(key)}: {html.escape(first.title)}</h3>'
                     f'<div class="grid" style="grid-template-columns:repeat({n},minmax(0,1fr))">'
                     f'{"".join(cells)}</div>')
    return "".join(parts)


def compact(rows: List[List]) -> List[List]:
    """The rows of the mean over heads, and of views with one head (column 2: the head)."""
    means = {(r[0], r[1]) for r in rows if r[2] == MEAN}
    return [r for r in rows if r[2] == MEAN or (r[0], r[1]) not in means]


def _statistics(c: Comparison) -> str:
    """The table of means over heads; where views have several heads, every head folded below."""
    short = compact(c.table)
    every = (f"<details><summary>every head ({len(c.table)} rows)</summary>"
             f"{_table(c.columns, c.table, (0, 1, 2))}</details>" if len(short) < len(c.table) else "")
    return _table(c.columns, short, (0, 1, 2)) + every


def render(c: Comparison, heading: str) -> str:
    runs = "".join(f"<li>{html.escape(k)}: <code>{html.escape(str(p))}</code></li>"
                   for k, p in c.paths.items())
    diag = diagnostics_rows(c)
    shown = _any_figure(diag)
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(heading)}</title>"
            f"{STYLE}</head><body><h1>{html.escape(heading)}</h1><p>{html.escape(c.family)}</p>"
            + (f"<p class='note'>{html.escape(c.note)}</p>" if c.note else "") +
            f"<ul>{runs}</ul><h2>Statistics</h2><p class='note'>{html.escape(NOTE)}</p>"
            f"{_statistics(c)}"
            + (f"<h2>Diagnostics</h2><p class='note'>{html.escape(JW_NOTE)}</p>"
               f"{_table(DIAG_COLUMNS, diag, (0, 3))}" if shown else "")
            + f"<h2>Examples</h2>{_examples(c)}</body></html>")


def _clean(value):
    """NaN as null (JSON has no NaN), in nested lists and dicts."""
    if isinstance(value, float) and value != value:
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def summary(c: Comparison) -> Dict:
    """The figures as JSON: the statistics rows, JS per pair, the diagnostics."""
    return _clean({"runs": {k: str(p) for k, p in c.paths.items()}, "examples": c.keys(),
            "statistics": [dict(zip(c.columns, r)) for r in c.table],
            "js": [{"a": a, "b": b, "view": v, "head": h, "js": js}
                   for (a, b, v, h), js in c.divergence.items()],
            "diagnostics": {label: {k: v for k, v in (d or {}).items() if k != "examples"} or None
                            for label, d in c.diagnostics.items()},
            "aer": c.alignment or None, "note": c.note or None})


def write_page(c: Comparison, out: Path, heading: str = "Attention across runs") -> Dict[str, Path]:
    """compare.html, stats.json and stats.csv in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    files = {"html": out / "compare.html", "json": out / "stats.json", "csv": out / "stats.csv"}
    write_text(files["html"], render(c, heading))
    write_json(files["json"], summary(c), indent=1, default=float, allow_nan=False)
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(c.columns)
    writer.writerows(c.table)
    write_text(files["csv"], buf.getvalue())
    return files


OWN = {"compare.html", "stats.json", "stats.csv", "wandb"}


def check_out(out: Path) -> None:
    """Refuse an output folder that holds anything but an earlier comparison's files."""
    if out.exists() and not out.is_dir():
        raise InputError(f"-o '{out}' is a file; name a folder for the comparison")
    other = sorted(p.name for p in out.iterdir() if p.name not in OWN) if out.is_dir() else []
    if other:
        raise InputError(f"'{out}' holds other files ({', '.join(other[:4])}), which the "
                         f"comparison could overwrite; name a new or empty folder with -o")


def print_tables(c: Comparison, console: Console) -> None:
    """The statistics and, where there are any, the diagnostics as terminal tables."""
    short = compact(c.table)
    note = " (mean over heads; every head: stats.csv)" if len(short) < len(c.table) else ""
    table = Table(title=f"attention across runs: {c.family}{note}", show_lines=False)
    for col in c.columns:
        table.add_column(col, justify="left" if col in ("run", "view", "head") else "right")
    for row in short:
        table.add_row(*(fmt(v) for v in row))
    console.print(table)
    rows = diagnostics_rows(c)
    if _any_figure(rows):
        diag = Table(title="diagnostics")
        for col in DIAG_COLUMNS:
            diag.add_column(col)
        for r in rows:
            diag.add_row(*(fmt(v) for v in r))
        console.print(diag)
