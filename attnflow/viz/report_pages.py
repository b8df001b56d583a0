"""The pages of ``attnflow-report`` (:mod:`attnflow.cli.report`): the table in the terminal, one
self-contained HTML page, the same table as Markdown and CSV, and the plots they show."""

from __future__ import annotations

import base64
import csv
import html
import io
import os
import re
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from rich.console import Console
from rich.table import Table

from attnflow.io.metric_names import curve_name
from attnflow.io.text import write_text
from attnflow.viz.report_plots import plot_curves, plot_param, thumbnails
from attnflow.viz.report_sections import Section, column_blocks, section_table, sections
from attnflow.viz.runs import PRUNED, Report, best_runs, fmt, ranking, table
from attnflow.viz.study import summary_line
from attnflow.viz.study_plots import plot_study

REPORT_OF = ".report-of"  # in a report folder: the resolved path it reports


def print_table(report: Report, console=None, most: Optional[int] = None) -> None:
    """The table in the terminal (rich), best run first; wide when output is not a terminal.
    ``most``: in short, the first ``most`` runs with their parameters and the ranking metric."""
    header, rows = table(report)
    if most is not None:
        keep = [i for i, h in enumerate(header) if h in ("run", "status", *report.params, report.metric)]
        header, rows = [header[i] for i in keep], [[row[i] for i in keep] for row in rows[:most]]
    console = console or Console()
    if not console.is_terminal:  # a file or a pipe: as wide as the table, no folded cells
        widths = [max(len(str(c)) for c in col) for col in zip(header, *rows)]
        console = Console(width=max(80, sum(widths) + 3 * len(widths) + 1), file=console.file)
    t = Table(title=f"{report.path} — " + ranking(report))
    for h in header:
        t.add_column(h, overflow="fold", justify="right" if h not in ("run", "status") else "left")
    best = best_runs(report)
    for run, row in zip(report.runs, rows):
        t.add_row(*row, style="bold" if run in best else None if run.status == "ok" else
                  "dim" if run.status == PRUNED else "red")  # ok: plain; pruned: dim; else red
    console.print(t)
    if len(rows) < len(report.runs):
        console.print(f"… and {len(report.runs) - len(rows)} more")
    for note in report.notes:
        console.print(f"note: {note}")


def _data_uri(path: Path) -> str:
    return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode("ascii")


def _rel(path: Path, start: Path) -> str:
    return Path(os.path.relpath(path, start)).as_posix()


def _summary_lines(report: Report) -> List[str]:
    n, ok, pruned, measured = (len(report.runs), sum(r.status == "ok" for r in report.runs),
                               sum(r.status == PRUNED for r in report.runs), sum(bool(r.metrics) for r in report.runs))
    sweeper = str(report.sweeper.get("_target_", "")).rsplit(".", 1)[-1] or None
    lines = [f"{report.kind}: {report.path}",
             f"{n} run(s): {ok} ok, " + (f"{pruned} pruned, " if pruned else "")
             + f"{measured} with metrics" + (f"; sweeper: {sweeper}" if sweeper else ""),
             ranking(report, where=True)]
    lines += [summary_line(report)] if report.study is not None else []
    return lines + ["common overrides: " + " ".join(f"{k}={fmt(v)}" for k, v in report.common.items())] * bool(report.common)


CSS = """body{font-family:sans-serif;margin:1.5em;color:#222}table{border-collapse:collapse;
font-size:0.9em;max-width:100%;margin-bottom:0.8em}th,td{border:1px solid #ccc;padding:3px 6px;text-align:right}
td.l,th{text-align:left}td{white-space:nowrap}td.l+td.l{white-space:normal}td.p{white-space:normal}
p,h1,h2,h3,figcaption{overflow-wrap:anywhere}
tr.best{background:#e8f5e9;font-weight:bold}tr.bad{color:#b00}tr.pruned{color:#777}figure{display:inline-block;margin:6px;vertical-align:top}
figcaption{font-size:0.8em;color:#555}img.plot{max-width:100%;height:auto}.note{color:#8a5300}"""


Plots = List[Tuple[str, Path]]  # (title, PNG file)
Thumbs = Dict[str, List[Tuple[Path, Path]]]  # per run: (thumbnail, picture)


def _breakable(text: str) -> str:
    """``text`` escaped, free to wrap after each ``/``, ``.``, ``_``, ``,`` or ``=`` (a column
    ``val/<task>/token_acc`` or ``model.encoder.hidden_dim``, a path, a list)."""
    return re.sub(r"([/._,=])(?=.)", r"\1<wbr>", html.escape(text))


def _html_table(report: Report, section: Section, best: List) -> List[str]:
    """A section's runs as tables (a heading where the report has several sections): one, or
    one per split of many metrics (:func:`~attnflow.viz.report_sections.column_blocks`). Run
    and status wrap between words, a parameter's value after ``/``, ``.``, ``_``, ``,`` or
    ``=``, a number never."""
    e = html.escape
    header, rows = section_table(report, section)
    kinds = ["l" if i < 2 else "p" if h in report.params else "" for i, h in enumerate(header)]
    metrics = sorted({m for r in section.runs for m in r.metrics})
    parts = [f"<h3>{e(section.title)}</h3>"] * bool(section.title)
    for n, cols in enumerate(column_blocks(header, metrics)):
        ident = "runs" + (f"-{section.key}" if section.title else "") + (f"-{n + 1}" if n else "")
        parts.append(f"<table id='{e(ident)}'><thead><tr>" + "".join(
            f"<th>{_breakable(header[i])}</th>" for i in cols) + "</tr></thead><tbody>")
        for run, row in zip(section.runs, rows):
            cls = "best" if run in best else {"ok": "", PRUNED: "pruned"}.get(run.status, "bad")
            parts.append(f"<tr class='{cls}' data-run='{e(run.name)}'>" + "".join(
                f"<td class='{kinds[i]}'>{_breakable(row[i]) if kinds[i] == 'p' else e(row[i])}</td>"
                for i in cols) + "</tr>")
        parts.append("</tbody></table>")
    return parts


def write_html(report: Report, out: Path, plots: Plots, thumbs: Thumbs) -> str:
    e = html.escape
    best = best_runs(report)
    parts = ["<!DOCTYPE html><html><head><meta charset='utf-8'>",
             f"<title>attnflow report: {e(report.path.name)}</title><style>{CSS}</style></head><body>",
             f"<h1>attnflow report: {e(report.path.name)}</h1>",
             *(f"<p>{e(line)}</p>" for line in _summary_lines(report)),
             *(f"<p class='note'>note: {e(n)}</p>" for n in report.notes), "<h2>Runs</h2>"]
    for section in sections(report):
        parts += _html_table(report, section, best)
    parts += ["<h2>Plots</h2>"] * bool(plots)
    parts += [f"<figure><img class='plot' alt='{e(t)}' src='{_data_uri(p)}'>"
              f"<figcaption>{e(t)}</figcaption></figure>" for t, p in plots]
    parts += ["<h2>Attention pictures</h2>"] * bool(thumbs)
    for run in (r for r in report.runs if r.name in thumbs):
        params = " ".join(f"{p}={fmt(report.value(run, p))}" for p in report.params)
        parts.append(f"<h3>run {e(run.name)} {e(params)}</h3>")
        parts += [f"<figure><a href='{e(_rel(orig, out))}'><img alt='attention: {e(run.name)}/{e(orig.name)}' "
                  f"src='{_data_uri(th)}'></a><figcaption>{e(orig.name)}</figcaption></figure>"
                  for th, orig in thumbs[run.name]]
    return "\n".join(parts + ["</body></html>\n"])


def _md_cell(value: str) -> str:
    return value.replace("|", "\\|").replace("\n", " ")


def write_md(report: Report, out: Path, plots: Plots, thumbs: Thumbs) -> str:
    lines = [f"# attnflow report: {report.path.name}", ""]
    lines += [f"- {_md_cell(line)}" for line in _summary_lines(report)]
    lines += [f"- note: {_md_cell(n)}" for n in report.notes]
    for section in sections(report):
        header, rows = section_table(report, section)
        lines += ["", f"### {_md_cell(section.title)}"] * bool(section.title)
        lines += ["", "| " + " | ".join(map(_md_cell, header)) + " |",
                  "|" + "|".join("---" for _ in header) + "|"]
        lines += ["| " + " | ".join(map(_md_cell, row)) + " |" for row in rows]
    lines += ["", "## Plots", ""] * bool(plots) + [f"![{t}]({_rel(p, out)})" for t, p in plots]
    lines += ["", "## Attention pictures"] * bool(thumbs)
    for run in (r for r in report.runs if r.name in thumbs):
        lines += ["", f"### run {run.name}", ""]
        lines += [f"[![{o.name}]({_rel(t, out)})]({_rel(o, out)})" for t, o in thumbs[run.name]]
    return "\n".join(lines) + "\n"


def curve_plots(report: Report, out: Path) -> Plots:
    """Each section's learning curves (:func:`~attnflow.viz.report_sections.sections`): of its
    ranking metric on validation, and of ``val/loss``."""
    plots: Plots = []
    for s in sections(report):
        base = curve_name(s.metric).split("/", 1)[-1]  # (best/val/acc: the curve val/acc)
        where = f" — {s.title}" if s.title else ""
        plots += [(f"learning curves: {m}{where}", path)
                  for m in dict.fromkeys([f"val/{base}"] * bool(base) + ["val/loss"])
                  if (path := plot_curves(report, m, out, s.runs, s.title, s.key))]
    return plots


def write_report(report: Report, out: Path) -> Dict[str, Path]:
    """Plots, thumbnails, report.html, report.md, report.csv and ``.report-of`` in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    write_text(out / REPORT_OF, str(report.path.resolve()) + "\n")
    ranked = not report.groups and sum(report.metric in r.metrics for r in report.runs) > 1
    plots: Plots = [(f"{report.metric} against {p}", path) for p in (report.params if ranked else [])
                    if (path := plot_param(report, p, out))]
    plots += curve_plots(report, out)
    plots += plot_study(report, out)
    thumbs = thumbnails(report, out)
    files = {"html": out / "report.html", "md": out / "report.md", "csv": out / "report.csv"}
    write_text(files["html"], write_html(report, out, plots, thumbs))
    write_text(files["md"], write_md(report, out, plots, thumbs))
    header, rows = table(report, full=True)
    buf = io.StringIO()
    csv.writer(buf).writerows([header, *(["" if v is None else v for v in row] for row in rows)])
    write_text(files["csv"], buf.getvalue())
    return files
