"""The pictures of ``attnflow-report``: the metric against each swept parameter, learning curves,
thumbnails (an Optuna study's figures: :mod:`attnflow.viz.study_plots`). Matplotlib and Pillow
are imported where they draw: attnflow-report imports this module, and its --help needs neither.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from attnflow.viz.runs import Report, Run, best_run, fmt, history, natural


def new_figure(width: float = 6.0, height: float = 4.0):
    """(figure, axes) of a matplotlib Figure not registered with pyplot."""
    from matplotlib.figure import Figure  # no pyplot: no global state, no display needed

    fig = Figure(figsize=(width, height), dpi=100)
    return fig, fig.add_subplot()


def legend_outside(ax, **kw):
    """The axes' legend right of them, top-aligned: it never covers a curve or point, and
    :func:`save_png`'s tight box widens the picture to hold it."""
    return ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, **kw)


def log_scale(ax, which: str) -> None:
    """``ax``'s ``which`` axis ("x" or "y") on a log scale whose tick labels stay apart: at most
    6 labelled powers of ten (every k-th over a wide range), minor ticks unlabelled (matplotlib
    would label 2×10⁻³, 3×10⁻³, … on short ranges, running into each other). For values that
    span 100× or more: then at least two powers of ten are labelled."""
    from matplotlib.ticker import LogFormatterSciNotation, LogLocator, NullFormatter

    (ax.set_xscale if which == "x" else ax.set_yscale)("log")
    axis = ax.xaxis if which == "x" else ax.yaxis
    axis.set_major_locator(LogLocator(base=10, numticks=6))
    axis.set_major_formatter(LogFormatterSciNotation(base=10))
    axis.set_minor_locator(LogLocator(base=10, subs=range(2, 10), numticks=12))
    axis.set_minor_formatter(NullFormatter())


def spans_decades(values) -> bool:
    """Whether positive ``values`` span 100× or more: a log scale shows them better."""
    return min(values) > 0 and max(values) / min(values) >= 100


def _safe(name: str) -> str:
    return re.sub(r"[^\w.-]+", "_", name).strip("_") or "x"


def save_png(fig, out: Path, name: str) -> Path:
    """``fig`` as ``out/<name>.png``, the name made safe for a file."""
    path = out / f"{_safe(name)}.png"
    fig.savefig(path, bbox_inches="tight")
    return path


def plot_param(report: Report, param: str, out: Path) -> Optional[Path]:
    """The metric against a swept parameter: a scatter for numbers, a strip plot for categories."""
    pts = [(report.value(r, param), r.metrics[report.metric]) for r in report.runs
           if report.metric in r.metrics and not math.isnan(r.metrics[report.metric])]
    if not pts:
        return None
    fig, ax = new_figure()
    numeric = all(isinstance(x, (int, float)) and not isinstance(x, bool) for x, _ in pts)
    if numeric:
        xs, ys = [float(x) for x, _ in pts], [y for _, y in pts]
        ax.scatter(xs, ys)
        if spans_decades(xs):
            log_scale(ax, "x")
    else:
        cats = sorted({fmt(x) for x, _ in pts}, key=natural)
        groups = [[y for x, y in pts if fmt(x) == c] for c in cats]
        if max(len(g) for g in groups) >= 3:
            ax.boxplot(groups, positions=range(len(cats)), widths=0.5, showfliers=False)
        for i, g in enumerate(groups):  # the strip: points spread evenly around their category
            spread = [0.0] if len(g) == 1 else [-0.15 + 0.3 * j / (len(g) - 1) for j in range(len(g))]
            ax.scatter([i + d for d in spread], g, zorder=3)
        ax.set_xticks(range(len(cats)), labels=cats, rotation=30 if len(cats) > 4 else 0)
        ax.set_xlim(-0.5, len(cats) - 0.5)
    best = best_run(report)
    bx = report.value(best, param) if best is not None else None
    if numeric and bx is not None:
        ax.scatter([float(bx)], [best.metrics[report.metric]], marker="*", s=200, color="gold",
                   edgecolor="black", zorder=4, label=f"best (run {best.name})")
        legend_outside(ax)
    ax.set_xlabel(param)
    ax.set_ylabel(report.metric)
    ax.set_title(f"{report.metric} against {param}")
    return save_png(fig, out, f"{report.metric}_vs_{param}")


def plot_curves(report: Report, metric: str, out: Path, runs: Optional[List[Run]] = None,
                where: str = "", key: str = "") -> Optional[Path]:
    """``metric`` per epoch of every run (of ``runs``, a part of the report titled ``where`` and
    filed under ``key``) from the CSV history, on a log scale where it spans 100× or more
    (losses falling by orders); a legend beside the curves up to 12 runs."""
    from matplotlib.ticker import MaxNLocator

    curves = [(r, history(r, metric)) for r in (report.runs if runs is None else runs)]
    curves = [(r, h) for r, h in curves if h]
    if not curves:
        return None
    fig, ax = new_figure()
    for r, h in curves:
        label = f"{r.name} " + " ".join(f"{p}={fmt(v)}" for p in report.params
                                         if (v := report.value(r, p)) is not None)
        epochs = sorted(h)
        ax.plot(epochs, [h[e] for e in epochs], marker="o", label=label.strip())
    if spans_decades([v for _, h in curves for v in h.values()]):
        log_scale(ax, "y")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # epochs: no 0.5
    if len(curves) <= 12:
        legend_outside(ax, fontsize=8)
    ax.set_xlabel("epoch")
    ax.set_ylabel(metric)
    ax.set_title(f"learning curves: {metric}" + (f"\n{where}" if where else ""))
    return save_png(fig, out, f"curves_{key + '_' if key else ''}{metric}")


def thumbnails(report: Report, out: Path, size: int = 360) -> Dict[str, List[Tuple[Path, Path]]]:
    """{run: [(thumbnail, original)]}: each run's attention pictures, shrunk with Pillow."""
    from PIL import Image

    res: Dict[str, List[Tuple[Path, Path]]] = {}
    for r in report.runs:
        for pic in r.pictures:
            dest = out / "attention" / _safe(r.name) / pic.name
            try:
                with Image.open(pic) as im:
                    im.thumbnail((size, size))
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    im.save(dest)
            except OSError as err:
                report.notes.append(f"run {r.name}: unreadable picture {pic} ({err})")
                continue
            res.setdefault(r.name, []).append((dest, pic))
    return res
