"""A preset's facts about its own data set hold for that data set only.

An experiment preset is tuned to one data set: IMDB's classes, HAN's 3 epochs. Given other
data (a field of the data module's :attr:`~attnflow.config.contracts.DataContract.source_fields`
typed, e.g. ``data.train_path``), the facts the user did not type give way:

- the data set's classes (``data.labels``) are read from the training file;
- the run stops on validation: early stopping on the checkpoint's metric with a patience of
  :data:`PATIENCE` validations, within at least :data:`MAX_EPOCHS` epochs (a preset that has
  early stopping keeps its own).

One warning line says what changed. A warm-up longer than the run is clamped where the schedule
is made (:func:`attnflow.tasks.optim.fitted_warmup`), whatever the data.
"""

from __future__ import annotations

import warnings
from typing import Any, Dict, List, Mapping

from attnflow.config.registry import DATA
from attnflow.io.console import AttnflowWarning

MAX_EPOCHS = 100  # the bound of a run that stops on validation
PATIENCE = 10  # validations without a better checkpoint metric before it stops
LENGTHS = ("trainer.max_epochs", "trainer.max_steps", "trainer.max_time")


def _typed(typed: Mapping[str, str], key: str) -> bool:
    """Whether the command line set ``key`` or a field in it."""
    return any(k == key or k.startswith(key + ".") for k in typed)


def _drop(node: Dict[str, Any], dotted: str) -> None:
    """Set the field ``dotted`` of ``node`` to null."""
    *parents, last = dotted.split(".")
    for key in parents:
        node = node[key]
    node[last] = None


def fit_to_given_data(cfg: Dict[str, Any], typed: Mapping[str, str]) -> List[str]:
    """Drop the preset's data-set facts from the resolved ``cfg`` where a field naming the data
    was typed (module docstring); what changed, as shown in the warning line."""
    data = cfg.get("data") or {}
    kind = DATA.get(data["name"]) if data.get("name") in DATA else None
    given = [f"data.{f}" for f in (kind.source_fields if kind else ()) if _typed(typed, f"data.{f}")]
    if not given:
        return []
    facts = [d for d in kind.data_set_facts(data) if not _typed(typed, f"data.{d}")]
    for dotted in facts:
        _drop(data, dotted)
    changed = [f"data.{d}=null (the training file's)" for d in facts]
    callbacks = cfg["callbacks"] = cfg.get("callbacks") or {}
    if callbacks.get("early_stopping") is None and not _typed(typed, "callbacks.early_stopping"):
        callbacks["early_stopping"] = {"patience": PATIENCE}
        changed.append(f"callbacks.early_stopping={{patience:{PATIENCE}}}")
        trainer = cfg.setdefault("trainer", {})
        epochs = trainer.get("max_epochs")
        if not any(_typed(typed, k) for k in LENGTHS) and epochs is not None and 0 <= epochs < MAX_EPOCHS:
            trainer["max_epochs"] = MAX_EPOCHS
            changed.append(f"trainer.max_epochs={MAX_EPOCHS}")
    if changed:
        warnings.warn(f"{', '.join(given)}: not the preset's data set, so {', '.join(changed)} "
                      f"(type a field to set it)", AttnflowWarning, stacklevel=2)
    return changed
