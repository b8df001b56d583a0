"""The matplotlib figures attnflow-report draws, measured after drawing: legends beside the axes
(never over a curve or point) and log axes whose tick labels stay apart; on a sweep folder built
here with learning rates and losses that span decades."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from attnflow.cli.report import main
from support import optuna_sweep_folder


def layout_faults(fig) -> list:
    """Where a drawn figure's legend covers its axes' data area, or where tick labels of a log
    axis run into each other (or fewer than two are labelled)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    renderer, faults = canvas.get_renderer(), []
    for ax in fig.axes:
        box, legend = ax.get_window_extent(renderer), ax.get_legend()
        if legend is not None and legend.get_window_extent(renderer).overlaps(box):
            faults.append(f"{ax.get_title()!r}: the legend covers the axes")
        for which, axis, (lo, hi) in (("x", ax.xaxis, ax.get_xlim()), ("y", ax.yaxis, ax.get_ylim())):
            if axis.get_scale() != "log":
                continue
            shown = [t.label1.get_window_extent(renderer) for t in axis.get_major_ticks() + axis.get_minor_ticks()
                     if t.label1.get_visible() and t.label1.get_text() and min(lo, hi) <= t.get_loc() <= max(lo, hi)]
            crossed = [(a, b) for i, a in enumerate(shown) for b in shown[i + 1:] if a.overlaps(b)]
            if crossed or len(shown) < 2:
                faults.append(f"{ax.get_title()!r}: {len(shown)} {which} tick labels, {len(crossed)} overlaps")
    return faults


def _spread_sweep(folder: Path) -> Path:
    """An Optuna sweep whose learning rates span decades and whose runs' val/loss falls from 8 to
    under 0.01 in 5 epochs (CSV histories): a log x axis and a log y axis in the report."""
    folder = optuna_sweep_folder(folder, [(0.1, "gru", 0.7), (0.001, "lstm", 0.2), (0.0003, "lstm", 0.5)])
    for i, job in enumerate(sorted(p for p in folder.iterdir() if p.name.isdigit())):
        summary = json.loads((job / "metrics.json").read_text())
        (job / "metrics.json").write_text(json.dumps({**summary, "epochs": 5}))
        (job / "csv" / "version_0").mkdir(parents=True)
        (job / "csv" / "version_0" / "metrics.csv").write_text("epoch,val/loss\n" + "".join(
            f"{e},{8 * 0.2 ** (e * (1 + i / 3))}\n" for e in range(5)))
    return folder


@pytest.mark.slow
def test_plots_keep_legends_beside_the_axes_and_log_ticks_apart(tmp_path, monkeypatch):
    """Every figure of the report (metric against each parameter, learning curves, the Optuna
    study's), each with a legend, two with log axes."""
    import attnflow.viz.report_plots as report_plots
    import attnflow.viz.study_plots as study_plots

    drawn, save = {}, report_plots.save_png

    def keep(fig, out, name):
        drawn[name] = fig
        return save(fig, out, name)
    monkeypatch.setattr(report_plots, "save_png", keep)
    monkeypatch.setattr(study_plots, "save_png", keep)
    main([str(_spread_sweep(tmp_path / "sweep")), "-o", str(tmp_path / "report")])
    with_legend = {n for n, f in drawn.items() if any(ax.get_legend() for ax in f.axes)}
    assert {"curves_val/loss", "best/val/score_vs_task.optim.lr", "optuna_history"} <= with_legend
    assert drawn["best/val/score_vs_task.optim.lr"].axes[0].get_xscale() == "log"  # 0.0003 to 0.1
    assert drawn["curves_val/loss"].axes[0].get_yscale() == "log"  # 8 down to 0.0002
    faults = {name: layout_faults(fig) for name, fig in drawn.items()}
    assert {name: f for name, f in faults.items() if f} == {}
