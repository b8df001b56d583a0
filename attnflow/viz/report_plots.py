"""The pictures of ``attnflow-report``: the metric against each swept parameter, learning curves,
Optuna's history and importances, thumbnails; what cannot be drawn becomes a note.
"""

from __future__ import annotations

import math
import re
import shutil
import tempfile
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from attnflow.viz.runs import Report, best_run, fmt, history, natural


def _figure(width: float = 6.0, height: float = 4.0):
    from matplotlib.figure import Figure  # no pyplot: no global state, no display needed

    fig = Figure(figsize=(width, height), dpi=100)
    return fig, fig.add_subplot()


def _safe(name: str) -> str:
    return re.sub(r"[^\w.-]+", "_", name).strip("_") or "x"


def _save(fig, out: Path, name: str) -> Path:
    path = out / f"{_safe(name)}.png"
    fig.savefig(path, bbox_inches="tight")
    return path


def plot_param(report: Report, param: str, out: Path) -> Optional[Path]:
    """The metric against a swept parameter: a scatter for numbers, a strip plot for categories."""
    pts = [(report.value(r, param), r.metrics[report.metric]) for r in report.runs
           if report.metric in r.metrics and not math.isnan(r.metrics[report.metric])]
    if not pts:
        return None
    fig, ax = _figure()
    numeric = all(isinstance(x, (int, float)) and not isinstance(x, bool) for x, _ in pts)
    if numeric:
        xs, ys = [float(x) for x, _ in pts], [y for _, y in pts]
        ax.scatter(xs, ys)
        if min(xs) > 0 and max(xs) / min(xs) >= 100:
            ax.set_xscale("log")
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
        ax.legend()
    ax.set_xlabel(param)
    ax.set_ylabel(report.metric)
    ax.set_title(f"{report.metric} against {param}")
    return _save(fig, out, f"{report.metric}_vs_{param}")


def plot_curves(report: Report, metric: str, out: Path) -> Optional[Path]:
    """``metric`` per epoch of every run (from the CSV history); a legend up to 12 runs."""
    curves = [(r, history(r, metric)) for r in report.runs]
    curves = [(r, h) for r, h in curves if h]
    if not curves:
        return None
    fig, ax = _figure()
    for r, h in curves:
        label = f"{r.name} " + " ".join(f"{p}={fmt(report.value(r, p))}" for p in report.params)
        epochs = sorted(h)
        ax.plot(epochs, [h[e] for e in epochs], marker="o", label=label.strip())
    if len(curves) <= 12:
        ax.legend(fontsize=8)
    ax.set_xlabel("epoch")
    ax.set_ylabel(metric)
    ax.set_title(f"learning curves: {metric}")
    return _save(fig, out, f"curves_{metric}")


@contextmanager
def _study(report: Report):
    """Yields (the sweep's Optuna study from a copy of its storage, None) or (None, why not)."""
    try:
        import optuna
    except ImportError:
        yield None, "optuna is not installed (pip install -e \".[sweep]\"): no optimisation " \
                    "history or parameter importances"
        return
    dbs = [report.path / "optuna.db"] if (report.path / "optuna.db").is_file() \
        else sorted(report.path.glob("*.db"))
    if not dbs:
        yield None, f"no Optuna storage (optuna.db) in {report.path}: the study was kept in " \
                    "memory, so there is no optimisation history or importances to show"
        return
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    with tempfile.TemporaryDirectory(prefix="attnflow-report-") as tmp:
        study, note = None, None
        try:
            shutil.copy2(dbs[0], Path(tmp) / "study.db")
            url = f"sqlite:///{Path(tmp) / 'study.db'}"
            name = report.sweeper.get("study_name")
            if not isinstance(name, str) or "${" in name:
                names = [s.study_name for s in optuna.get_all_study_summaries(url)]
                name = names[0] if len(names) == 1 else None
                note = None if name else (f"{dbs[0].name} holds studies {', '.join(names) or '(none)'}"
                                          "; multirun.yaml names none (hydra.sweeper.study_name)")
            if name:
                study = optuna.load_study(study_name=name, storage=url)
        except Exception as err:
            note = f"could not read the Optuna study in {dbs[0]}: {err}"
        yield study, note


def plot_optuna(report: Report, out: Path) -> List[Tuple[str, Path]]:
    """Optuna's optimisation history and parameter importances (mean decrease in impurity:
    optuna's default fANOVA fails with current scikit-learn)."""
    with _study(report) as (study, note):
        if study is None:
            report.notes.append(note)
            return []
        return _optuna_figures(report, study, out)


def _optuna_figures(report: Report, study, out: Path) -> List[Tuple[str, Path]]:
    import matplotlib
    import matplotlib.pyplot as plt
    import optuna

    figs: List[Tuple[str, Path]] = []
    done = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    if len(study.directions) > 1:
        report.notes.append("a multi-objective study: no single-objective history or importances")
        return figs
    with warnings.catch_warnings(), matplotlib.rc_context():  # optuna sets a global style
        warnings.simplefilter("ignore")  # optuna's matplotlib plots are marked experimental
        ax = optuna.visualization.matplotlib.plot_optimization_history(study)
        ax.set_ylabel(report.metric if report.metric_source == "optimized_metric" else "objective")
        figs.append(("Optuna: optimisation history", _save(ax.figure, out, "optuna_history")))
        plt.close(ax.figure)
        try:
            imp = optuna.importance.get_param_importances(
                study, evaluator=optuna.importance.MeanDecreaseImpurityImportanceEvaluator(seed=0))
        except Exception as err:  # e.g. fewer than 2 completed trials, scikit-learn missing
            report.notes.append(f"no parameter importances ({len(done)} completed trial(s)): {err}")
            return figs
    fig, ax = _figure(6.0, 1.0 + 0.4 * len(imp))
    names = list(imp)[::-1]
    ax.barh(names, [imp[n] for n in names])
    ax.set_xlabel("importance (mean decrease in impurity)")
    ax.set_title(f"Optuna: parameter importances ({len(done)} trials)")
    figs.append(("Optuna: parameter importances", _save(fig, out, "optuna_importances")))
    return figs


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
