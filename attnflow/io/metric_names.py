"""The names of a training run's figures (docs/training.md, "Names: curves, the result, epochs").

``<split>/<metric>`` (``train/loss``, ``val/acc``) is a curve, one point per epoch; a single value
of it, wherever one is shown, is its last epoch's. ``best/val/<metric>`` is the run's result: the
best (or averaged) checkpoint validated after training. ``test/<metric>`` is measured once, on
that checkpoint, and keeps its name.
"""

from __future__ import annotations

from typing import Dict, Mapping

BEST = "best/"  # the prefix of the result's validation metrics, logged after training


def result_name(metric: str) -> str:
    """The name of ``metric``'s value in a run's result: ``val/acc`` → ``best/val/acc``; any other
    name (``test/acc``, ``best/val/acc``) is itself."""
    return BEST + metric if metric.startswith("val/") else metric


def curve_name(metric: str) -> str:
    """The curve whose result ``metric`` is: ``best/val/acc`` → ``val/acc``; any other is itself."""
    return metric.removeprefix(BEST)


def current_names(metrics: Mapping[str, float]) -> Dict[str, float]:
    """A ``metrics.json``'s ``metrics`` in today's names. One written before the result was named
    ``best/val/…`` holds no ``best/`` key, and its ``val/…`` are the best checkpoint's."""
    if any(k.startswith(BEST) for k in metrics):
        return dict(metrics)
    return {result_name(k): v for k, v in metrics.items()}
