"""The figures of a sweep's Optuna study in ``attnflow-report``: the optimisation history, every
trial's intermediate values (pruned ones dashed grey), the parameter importances (one figure per
objective) and, for several objectives, the Pareto front; what cannot be drawn becomes a note.
Matplotlib and Optuna are imported where they draw: attnflow-report imports this module for its
--help too, and where the sweep extra (Optuna) is not installed.
"""

from __future__ import annotations

import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import List, Optional, Tuple

from attnflow.io.metric_names import curve_name
from attnflow.viz.report_plots import legend_outside, new_figure, save_png
from attnflow.viz.runs import Report
from attnflow.viz.study import objective_names

Figures = List[Tuple[str, Path]]
# how each kind of trial's curve of intermediate values is drawn
# (a marker on each step: a trial that reported once is a point)
CURVES = {"complete": {"color": "tab:blue", "linestyle": "-", "linewidth": 1.2, "alpha": 0.8},
          "pruned": {"color": "grey", "linestyle": "--", "linewidth": 1.0, "alpha": 0.7},
          "running or failed": {"color": "tab:red", "linestyle": ":", "linewidth": 1.0, "alpha": 0.8}}
CURVES = {k: {**v, "marker": ".", "markersize": 4} for k, v in CURVES.items()}


@contextmanager
def _optuna_style():
    """Optuna's matplotlib plots set a global style and warn that they are experimental: both
    kept inside; each plot's pyplot figure is closed by the caller."""
    import matplotlib

    with warnings.catch_warnings(), matplotlib.rc_context():
        warnings.simplefilter("ignore")
        yield


def _save_pyplot(ax, out: Path, name: str) -> Path:
    """An Optuna plot's figure as ``out/<name>.png``, its legend (drawn over the points) moved
    beside the axes first; the pyplot figure is closed."""
    import matplotlib.pyplot as plt

    one = isinstance(ax, plt.Axes)  # else an array of them (a plot of several panels)
    legend = ax.get_legend() if one else None
    if legend is not None:
        legend_outside(ax, handles=legend.legend_handles,
                       labels=[t.get_text() for t in legend.get_texts()])
    fig = ax.figure if one else ax.flat[0].figure
    path = save_png(fig, out, name)
    plt.close(fig)
    return path


def plot_history(report: Report, out: Path) -> Figures:
    """Optuna's optimisation history: each completed trial's value and the best so far."""
    import optuna

    with _optuna_style():
        ax = optuna.visualization.matplotlib.plot_optimization_history(report.study)
        ax.set_ylabel(objective_names(report)[0])
        return [("Optuna: optimisation history", _save_pyplot(ax, out, "optuna_history"))]


def _kind(trial) -> str:
    return {"COMPLETE": "complete", "PRUNED": "pruned"}.get(trial.state.name, "running or failed")


def plot_intermediate(report: Report, out: Path) -> Optional[Path]:
    """Every trial's reported values by step: completed trials blue, pruned ones dashed grey
    ending in a cross where the pruner stopped them, running or failed ones dotted red."""
    trials = [t for t in report.study.trials if t.intermediate_values]
    if not trials:  # a multi-objective study cannot report them: no note there
        if len(report.study.directions) == 1:
            report.notes.append("no trial reported intermediate values: no curves of them to show")
        return None
    fig, ax = new_figure()
    seen = set()
    for t in trials:
        kind, steps = _kind(t), sorted(t.intermediate_values)
        n = sum(_kind(u) == kind for u in trials)
        ax.plot(steps, [t.intermediate_values[s] for s in steps], **CURVES[kind],
                label=None if kind in seen else f"{kind} ({n})")
        seen.add(kind)
        if kind == "pruned":
            ax.plot(steps[-1:], [t.intermediate_values[steps[-1]]], "x", color="grey")
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    legend_outside(ax, fontsize=8)
    ax.set_xlabel("step (validation)")
    ax.set_ylabel(f"intermediate value: {curve_name(objective_names(report)[0])}")  # (the curve)
    ax.set_title(f"Optuna: intermediate values of {len(trials)} trials")
    return save_png(fig, out, "optuna_intermediate")


def plot_importances(report: Report, out: Path) -> Figures:
    """Parameter importances (Optuna's default fANOVA, seeded), one figure per objective."""
    import optuna

    names = objective_names(report)
    done = sum(t.state.name == "COMPLETE" for t in report.study.trials)
    if done < 2:
        report.notes.append(f"no parameter importances ({done} completed trial(s)): they need two")
        return []
    figs: Figures = []
    for i, name in enumerate(names):
        target = (lambda t, i=i: t.values[i]) if len(names) > 1 else None
        try:
            with _optuna_style():
                imp = optuna.importance.get_param_importances(
                    report.study, target=target,
                    evaluator=optuna.importance.FanovaImportanceEvaluator(seed=0))
        except Exception as err:  # e.g. scikit-learn missing, or no parameter varies
            report.notes.append(f"no parameter importances for {name} ({done} completed "
                                f"trial(s)): {err}")
            continue
        fig, ax = new_figure(6.0, 1.0 + 0.4 * len(imp))
        params = list(imp)[::-1]
        ax.barh(params, [imp[p] for p in params])
        ax.set_xlabel("importance (fANOVA)")
        ax.set_title(f"Optuna: parameter importances for {name} ({done} trials)")
        title = "Optuna: parameter importances" + (f" for {name}" if len(names) > 1 else "")
        file = "optuna_importances" + (f"_{name}" if len(names) > 1 else "")
        figs.append((title, save_png(fig, out, file)))
    return figs


def plot_pareto(report: Report, out: Path) -> Figures:
    """Optuna's Pareto front of 2 or 3 objectives (the front's trials marked), else a note."""
    import optuna

    names = objective_names(report)
    if len(names) > 3:
        report.notes.append(f"no Pareto front: {len(names)} objectives (it is drawn for 2 or 3)")
        return []
    if not any(t.state.name == "COMPLETE" for t in report.study.trials):
        report.notes.append("no Pareto front: no completed trial")
        return []
    with _optuna_style():
        ax = optuna.visualization.matplotlib.plot_pareto_front(report.study, target_names=names)
        return [("Optuna: Pareto front", _save_pyplot(ax, out, "optuna_pareto"))]


def plot_study(report: Report, out: Path) -> Figures:
    """The study's figures: history (one objective) or Pareto front (several), intermediate
    values, importances."""
    if report.study is None:
        return []
    many = len(report.study.directions) > 1
    figs = plot_pareto(report, out) if many else plot_history(report, out)
    curves = plot_intermediate(report, out)
    if curves is not None:
        figs.append(("Optuna: intermediate values", curves))
    return figs + plot_importances(report, out)
