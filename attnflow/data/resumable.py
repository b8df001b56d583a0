"""Train loaders that resume mid-epoch at their next batch, by Lightning's own mechanism for
stateful loaders: the fit loop saves the ``state_dict()`` of each train loader that has
``state_dict``/``load_state_dict`` in a checkpoint, and hands it back to ``load_state_dict`` on
resume. The state is the torch random state the epoch's order was drawn from (a shuffling
sampler and the loader's worker seeds draw from it) and the batches of the epoch trained; the
epoch's next iterator draws that order again, skips those batches, then puts the random stream
back as it was.

``trained`` is kept by the trainer's side (:class:`attnflow.training.state.TrainingState`), which
also restores the position where Lightning made the loader before the checkpoint's loops were
restored (a schedule that reads ``trainer.estimated_stepping_batches`` in
``configure_optimizers``): the loader cannot tell a trained batch from one fetched ahead.
The global random streams that side saves with it are read and put back here too
(:func:`rng_state`: as tensors and plain values, since checkpoints are read with
``weights_only=True``).
"""

from __future__ import annotations

import random
from typing import Any, Dict, Iterator, Optional

import numpy as np
import torch
from torch.utils.data import DataLoader


class Resumable:
    """The resumable part of a loader, listed before its ``DataLoader`` class (no ``__init__``:
    Lightning re-creates a loader under DDP from the arguments it was made with). A subclass
    whose batches are not ``DataLoader``'s gives them by :meth:`epoch_batches`."""

    trained = 0  # batches of this epoch trained (0 at an epoch's end)
    epoch_rng: Optional[torch.Tensor] = None  # the torch state this epoch's order was drawn from
    _pending: Optional[Dict[str, Any]] = None  # a loaded position, used by the next iterator

    def state_dict(self) -> Dict[str, Any]:
        return {"trained": self.trained,
                "epoch_rng": self.epoch_rng if self.epoch_rng is not None else torch.get_rng_state()}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        self._pending = dict(state) if state and state.get("trained") else None

    def epoch_batches(self) -> Iterator[Any]:
        """One epoch's batches from its start (the loader's own iterator)."""
        return super().__iter__()  # type: ignore[misc]

    def __iter__(self) -> Iterator[Any]:
        return self._from_position()

    def _from_position(self) -> Iterator[Any]:
        """The epoch's batches; after a loaded position, its order drawn again from the state it
        was first drawn from and the batches trained skipped. Lazy: it starts at the first batch
        asked for, after the trainer restored the random streams."""
        pending, self._pending = self._pending, None
        skip = int(pending["trained"]) if pending else 0
        resumed_stream = torch.get_rng_state()
        if skip:
            torch.set_rng_state(pending["epoch_rng"])
        self.epoch_rng = torch.get_rng_state()
        batches = self.epoch_batches()
        for _ in range(skip):
            next(batches, None)
        if skip:
            torch.set_rng_state(resumed_stream)
        yield from batches


class ResumableDataLoader(Resumable, DataLoader):
    """A ``DataLoader`` (the same arguments) that resumes mid-epoch (module docstring)."""


def rng_state() -> Dict[str, Any]:
    """The global random streams as tensors and plain values."""
    version, py_state, gauss = random.getstate()
    _, keys, pos, has_gauss, cached = np.random.get_state()
    state = {"torch": torch.get_rng_state(),
             "numpy": {"keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
                       "has_gauss": int(has_gauss), "cached_gaussian": float(cached)},
             "python": {"version": version, "state": torch.tensor(py_state, dtype=torch.int64),
                        "gauss_next": gauss}}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: Dict[str, Any]) -> None:
    """Put back what :func:`rng_state` returned."""
    torch.set_rng_state(state["torch"])
    n = state["numpy"]
    np.random.set_state(("MT19937", n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"],
                         n["cached_gaussian"]))
    p = state["python"]
    random.setstate((p["version"], tuple(int(v) for v in p["state"].tolist()), p["gauss_next"]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
