"""Several labelled data sets at once, one per task of a multi-task run (task ``multitask``).

Config (``conf/data/multitask_imdb.yaml``)::

    name: multitask
    common: {name: text_classification, train_path: …, val_path: …}   # what the tasks share
    tasks:                        # one entry per task of task.tasks (the same names)
      polarity: {}                # common as it is
      rating: {label_field: rating}   # common with these fields changed

Each task's data config is ``common`` with the task's fields laid over it (an entry with another
``name`` is a whole data config of its own), validated and built through the data registry
(:data:`~attnflow.config.registry.DATA`) as a single-task run's would be.

One encoder reads every task's inputs, so the tasks share one tokenizer: the first task's data
module makes it (trains it on its training texts, loads the ``tokenizer_from`` run's, or reads the
one saved with this run on resume) and the others are handed the same object, never training
their own; a later task's tokenizer fields are unread (a warning): put them in ``common``.

Loaders: training takes one batch of every task per step, a batch ``{task: that task's batch}``;
an epoch is the longest task's batches, shorter tasks start over (Lightning's ``max_size_cycle``).
In one process this is :class:`CycleLoader`, a ``DataLoader`` (so a run resumes within an
epoch as a single-task run does); under DDP it is Lightning's ``CombinedLoader(…,
"max_size_cycle")``, which gives each task's loader its distributed sampler. Validation and test
run each task's loader in turn (``CombinedLoader(…, "sequential")``, ``dataloader_idx`` = the
task's place in :attr:`task_names`). Each task's loader is its own data module's.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Tuple

import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader

from attnflow.config.registry import DATA, AttnflowWarning, BlockSpec, ConfigError

# fields that decide a text data module's tokenizer: one tokenizer for all tasks, so equal
TOKENIZER_FIELDS = ("tokenizer_from", "vocab_size", "lowercase", "tokenizer")


def _mapping(value: Any, path: str) -> Dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(f"'{path}' must be a mapping of fields, got {value!r}")
    return dict(value)


class CycleLoader(DataLoader):
    """One batch of every task's loader per step, ``{task: batch}``, for ``len`` = the longest
    loader's batches; a shorter loader starts over when it runs out (Lightning's
    ``max_size_cycle``). A ``DataLoader`` (over nothing of its own) so that the run's training
    state machinery can make it resumable within an epoch like any other train loader."""

    def __init__(self, loaders: Dict[str, Any]):
        super().__init__(range(1), batch_size=None)  # the dataset is unused: __iter__ is the tasks'
        self.loaders = loaders

    def __len__(self) -> int:
        return max(len(loader) for loader in self.loaders.values())

    def __iter__(self):
        iters = {t: iter(loader) for t, loader in self.loaders.items()}
        for _ in range(len(self)):
            batch = {}
            for t, loader in self.loaders.items():
                try:
                    batch[t] = next(iters[t])
                except StopIteration:  # this task's loader is shorter: it starts over
                    iters[t] = iter(loader)
                    batch[t] = next(iters[t])
            yield batch


@DATA.register("multitask")
class MultiTaskDataModule(pl.LightningDataModule):
    """One data module per task, built from ``common`` + the task's fields (module docstring).

    Args:
        common: the data config the tasks share (a data block: name and fields) (default None:
            every task entry is a whole data config).
        tasks: task name → its fields over ``common`` (a mapping; ``{}``: common as it is), in the
            order of ``task.tasks`` or any other (at least one).
    """

    interface = "multitask"  # with task 'multitask' and model 'bert' (model.head=multitask)

    def __init__(self, *, common: BlockSpec["data"] = None, tasks: Dict[str, Any] = {}):
        super().__init__()
        configs = self.task_configs({"common": common, "tasks": tasks})
        self.parts: Dict[str, pl.LightningDataModule] = {}
        for t, cfg in configs.items():
            try:
                self.parts[t] = DATA.build(cfg, path=f"data.tasks.{t}")
            except ConfigError:
                raise
            except ValueError as err:  # a data module's own check: say which task's data
                raise ConfigError(f"data.tasks.{t}: {err}") from None
        self._shared = False

    # -- config ------------------------------------------------------------------------------------
    @classmethod
    def task_configs(cls, cfg: Mapping[str, Any], path: str = "data") -> Dict[str, Dict[str, Any]]:
        """{task: its validated data config} of a ``multitask`` data config."""
        common = cfg.get("common")
        if common is not None:
            common = DATA.validate(common, f"{path}.common")
        entries = _mapping(cfg.get("tasks"), f"{path}.tasks")
        if not entries:
            raise ConfigError(f"'{path}.tasks' names no task: give each task of task.tasks its data "
                              f"fields, e.g. {path}.tasks.polarity={{}} (common as it is)")
        out: Dict[str, Dict[str, Any]] = {}
        for t, entry in entries.items():
            where = f"{path}.tasks.{t}"
            entry = _mapping(entry, where)
            own = entry.get("name")
            if common is None and not own:
                raise ConfigError(f"'{where}' needs a 'name' (a data module): there is no "
                                  f"{path}.common to start from")
            merged = entry if own and (common is None or own != common["name"]) else {**common, **entry}
            if merged.get("name") == "multitask":
                raise ConfigError(f"'{where}.name': a task's data cannot be multitask itself")
            out[str(t)] = DATA.validate(merged, where)
        first, *others = out
        for t in others:  # the first task's data makes the one tokenizer: a later task's is unread
            for field in TOKENIZER_FIELDS:
                if field in out[t] and out[t][field] != out[first].get(field):
                    warnings.warn(f"{path}.tasks.{t}.{field}={out[t][field]!r} unread: the first "
                                  f"task's data makes the shared tokenizer", AttnflowWarning, stacklevel=2)
        return out

    @classmethod
    def check_config(cls, cfg: Mapping[str, Any]) -> None:
        """Every task's data config is valid."""
        cls.task_configs(cfg["data"])

    @classmethod
    def longest_positions(cls, fields: Mapping[str, Any]) -> Optional[Tuple[int, str]]:
        """The longest of the tasks' data (their classes' ``longest_positions``), and why, at the
        task's path (``{at}tasks.<task>.``); None where no task's data says."""
        said = []
        for t, task in cls.task_configs(fields).items():
            answer = DATA.ask(task, "longest_positions", f"data.tasks.{t}")
            if answer:
                said.append((answer[0], answer[1].replace("{at}", f"{{at}}tasks.{t}.")))
        return max(said, key=lambda answer: answer[0], default=None)

    @property
    def task_names(self) -> List[str]:
        """The tasks in loader order (``dataloader_idx`` of validation and test)."""
        return list(self.parts)

    # -- the shared tokenizer ------------------------------------------------------------------------
    @property
    def tokenizer(self):
        """The tokenizer every task reads with (the first task's; None before it is made)."""
        return getattr(next(iter(self.parts.values())), "tokenizer", None)

    def _share_tokenizer(self) -> None:
        """The first task's tokenizer, made (or loaded) once, handed to the other tasks."""
        if self._shared:
            return
        first, *others = self.parts.values()
        if hasattr(first, "prepare_tokenizer"):
            first.prepare_tokenizer()
        tokenizer = getattr(first, "tokenizer", None)
        for part in others:
            if tokenizer is not None and hasattr(part, "tokenizer"):
                part.tokenizer = tokenizer
        self._shared = True

    def set_run_dir(self, run_dir) -> None:
        """The first task's data keeps the tokenizer with the run (and reads it back on resume)."""
        first = next(iter(self.parts.values()))
        if hasattr(first, "set_run_dir"):
            first.set_run_dir(run_dir)

    def save_artifacts(self, run_dir) -> Optional[Path]:
        self._share_tokenizer()
        first = next(iter(self.parts.values()))
        return first.save_artifacts(run_dir) if hasattr(first, "save_artifacts") else None

    def artifacts(self) -> dict:
        """Each task's artifacts (``tasks``), the shared tokenizer once (``tokenizer``)."""
        self._share_tokenizer()
        out: Dict[str, Any] = {"tasks": {}}
        for t, part in self.parts.items():
            art = dict(part.artifacts()) if hasattr(part, "artifacts") else {}
            if "tokenizer" in art:
                out["tokenizer"] = art.pop("tokenizer")
            out["tasks"][t] = art
        return out

    def setup_evaluation(self, run_dir, artifacts: dict, split: str) -> None:
        """Each task's data for evaluating a trained run on ``split`` (its own ``setup_evaluation``
        with its artifacts and the shared tokenizer)."""
        per_task = artifacts.get("tasks") or {}
        for t, part in self.parts.items():
            if hasattr(part, "setup_evaluation"):
                art = {**(per_task.get(t) or {}), "tokenizer": artifacts.get("tokenizer")}
                part.setup_evaluation(run_dir, art, split)
        first, *others = self.parts.values()
        for part in others:
            if getattr(first, "tokenizer", None) is not None and hasattr(part, "tokenizer"):
                part.tokenizer = first.tokenizer
        self._shared = True

    # -- what models and tasks need ----------------------------------------------------------------
    def model_context(self) -> dict:
        """The first task's context (vocabulary, padding id) and ``tasks``: task → (what its data
        gives, its number of classes), from which the model builds one head per task."""
        self._share_tokenizer()
        contexts = {t: dict(p.model_context()) for t, p in self.parts.items()}
        first = next(iter(contexts))
        for t, ctx in contexts.items():
            for key in ("vocab_size", "pad_id", "src_vocab"):
                if key in ctx and ctx[key] != contexts[first].get(key):
                    raise ConfigError(f"data.tasks.{t} gives {key}={ctx[key]} but the first task's "
                                      f"data ({first}) gives {contexts[first].get(key)}: the tasks "
                                      f"share one encoder")
        out = {k: v for k, v in contexts[first].items() if k != "num_classes"}
        out["tasks"] = {t: (getattr(p, "interface", None), int(contexts[t].get("num_classes", 0)))
                        for t, p in self.parts.items()}
        return out

    def task_context(self) -> dict:
        """``contexts``: task → its data's task context (classes, their names)."""
        return {"contexts": {t: dict(p.task_context()) for t, p in self.parts.items()}}

    # -- data --------------------------------------------------------------------------------------
    def setup(self, stage: Optional[str] = None) -> None:
        self._share_tokenizer()
        for part in self.parts.values():
            part.setup(stage)

    def _task_loaders(self, split: str) -> Dict[str, Any]:
        self._share_tokenizer()
        loaders = {}
        for t, part in self.parts.items():
            part.trainer = self.trainer  # the epoch of bucketed shuffling (data.buckets)
            loaders[t] = getattr(part, f"{split}_dataloader")()
        return loaders

    def train_dataloader(self):
        loaders = self._task_loaders("train")
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            from pytorch_lightning.utilities import CombinedLoader

            return CombinedLoader(loaders, "max_size_cycle")  # Lightning shards each task's loader
        return CycleLoader(loaders)

    def val_dataloader(self):
        from pytorch_lightning.utilities import CombinedLoader

        return CombinedLoader(self._task_loaders("val"), "sequential")

    def test_dataloader(self):
        from pytorch_lightning.utilities import CombinedLoader

        why = self.missing_test()
        if why:
            raise ValueError(why)
        return CombinedLoader(self._task_loaders("test"), "sequential")

    def missing_test(self) -> Optional[str]:
        for t, part in self.parts.items():
            why = part.missing_test() if hasattr(part, "missing_test") else None
            if why:
                return f"data.tasks.{t}: {why}"
        return None

    @property
    def has_test(self) -> bool:
        return self.missing_test() is None

    def example_batch(self, n: int, split: str = "val"):
        """The first task's examples (dashboards)."""
        first = next(iter(self.parts.values()))
        return first.example_batch(n, split)
