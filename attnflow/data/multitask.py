"""One data set per task of a multi-task run: ``common`` with each task's fields laid over it.
The tasks share one tokenizer, made by the first task's data; training takes a batch of every
task per step (Lightning's ``max_size_cycle``), evaluation each task's loader in turn.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import pytorch_lightning as pl
import torch
from omegaconf import DictConfig, OmegaConf
from pytorch_lightning.utilities import CombinedLoader

from attnflow.config.contracts import DataContract
from attnflow.config.registry import DATA, BlockSpec, ConfigError
from attnflow.data.resumable import ResumableDataLoader
from attnflow.io.console import warn_unread

# fields that decide a text data module's tokenizer: one tokenizer for all tasks, so equal
TOKENIZER_FIELDS = ("tokenizer_from", "vocab_size", "lowercase", "tokenizer")


def _mapping(value: Any, path: str) -> Dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(f"'{path}' must be a mapping of fields, got {value!r}")
    return dict(value)


class CycleLoader(ResumableDataLoader):
    """One batch of every task's loader per step, ``{task: batch}``, for the longest loader's
    length, a shorter loader starting over; resumable mid-epoch (:mod:`attnflow.data.resumable`)."""

    def __init__(self, loaders: Dict[str, Any]):
        super().__init__(range(1), batch_size=None)  # the dataset is unused: __iter__ is the tasks'
        self.loaders = loaders

    def __len__(self) -> int:
        return max(len(loader) for loader in self.loaders.values())

    def epoch_batches(self):
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
class MultiTaskDataModule(DataContract, pl.LightningDataModule):
    """One data module per task, built from ``common`` + the task's fields (``{}``: common as it
    is; module docstring)."""

    interface = "multitask"  # with task 'multitask' and model 'bert' (model.head=multitask)
    source_fields = ("common.train_path", "common.hf_dataset")

    @classmethod
    def data_set_facts(cls, fields: Mapping[str, Any]) -> List[str]:
        """Each task's classes (``tasks.<task>.labels``)."""
        return [f"tasks.{t}.labels" for t, entry in (fields.get("tasks") or {}).items()
                if isinstance(entry, Mapping) and entry.get("labels") is not None]

    def __init__(self, *, common: BlockSpec["data"] = None, tasks: Dict[str, Any] = {}):
        super().__init__()
        configs = self.task_configs({"common": common, "tasks": tasks})
        self.parts: Dict[str, DataContract] = {}
        for t, cfg in configs.items():
            try:
                self.parts[t] = DATA.build(cfg, path=f"data.tasks.{t}")
            except ConfigError:
                raise
            except ValueError as err:  # a data module's own check: say which task's data
                raise ConfigError(f"data.tasks.{t}: {err}") from None
        if not self.parts:
            raise ConfigError("'data.tasks' must map at least one task to its data fields")
        self.first = next(iter(self.parts.values()))  # makes the tokenizer every task reads with
        self._shared = False

    @classmethod
    def task_configs(cls, cfg: Mapping[str, Any], path: str = "data") -> Dict[str, Dict[str, Any]]:
        """{task: its validated data config} of a ``multitask`` data config."""
        common = cfg.get("common")
        if common is not None:
            common = DATA.validate(common, f"{path}.common")
        entries = _mapping(cfg.get("tasks"), f"{path}.tasks")
        out: Dict[str, Dict[str, Any]] = {}
        for t, entry in entries.items():
            where = f"{path}.tasks.{t}"
            entry = _mapping(entry, where)
            own = entry.get("name")
            if common is None and not own:
                raise ConfigError(f"'{where}' needs a 'name' (a data module): there is no "
                                  f"{path}.common to start from")
            merged = entry if own and (common is None or own != common["name"]) else {**common, **entry}
            out[str(t)] = DATA.validate(merged, where)
        first = next(iter(out), None)
        for t in list(out)[1:]:  # the first task's data makes the one tokenizer
            for field in TOKENIZER_FIELDS:
                if field in out[t] and out[t][field] != out[first].get(field):
                    warn_unread(f"{path}.tasks.{t}.{field}={out[t][field]!r}",
                                "the first task's data makes the shared tokenizer")
        return out

    @classmethod
    def task_data_names(cls, cfg: Any) -> Dict[str, Optional[str]]:
        """{task: the name of its data module (its own, else common's)} of a ``multitask`` data
        config as written, in order (nothing validated: None where it names none)."""
        if isinstance(cfg, DictConfig):
            cfg = OmegaConf.to_container(cfg, resolve=False)
        if not isinstance(cfg, Mapping):
            return {}
        common, tasks = cfg.get("common"), cfg.get("tasks")
        shared = common.get("name") if isinstance(common, Mapping) else None
        entries = tasks.items() if isinstance(tasks, Mapping) else ()
        return {str(t): (e.get("name") if isinstance(e, Mapping) and e.get("name") else shared)
                for t, e in entries}

    @classmethod
    def check_files(cls, fields: Mapping[str, Any], test: bool = True) -> None:
        """Each task's data files are there (its data module's ``check_files``; nothing read)."""
        for task in cls.task_configs(fields).values():
            DATA.get(task["name"]).check_files(task, test)

    @classmethod
    def longest_positions(cls, fields: Mapping[str, Any]) -> Optional[Tuple[int, str]]:
        """The longest of the tasks' ``longest_positions``, and why (None where none says)."""
        said = []
        for t, task in cls.task_configs(fields).items():
            answer = DATA.get(task["name"]).longest_positions(task)
            if answer:
                said.append((answer[0], answer[1].replace("{at}", f"{{at}}tasks.{t}.")))
        return max(said, key=lambda answer: answer[0], default=None)

    @property
    def task_names(self) -> List[str]:
        """The tasks in loader order (``dataloader_idx`` of validation and test)."""
        return list(self.parts)

    @property
    def tokenizer(self):
        return self.first.tokenizer

    def _share_tokenizer(self, prepare: bool = True) -> None:
        """The first task's tokenizer, made (or loaded) once, handed to the other tasks."""
        if self._shared:
            return
        if prepare:
            self.first.prepare_tokenizer()
        for part in list(self.parts.values())[1:]:
            if self.tokenizer is not None:
                part.tokenizer = self.tokenizer
        self._shared = True

    def set_run_dir(self, run_dir) -> None:
        """The first task's data keeps the tokenizer with the run (and reads it back on resume)."""
        self.first.set_run_dir(run_dir)

    def save_artifacts(self, run_dir) -> Optional[Path]:
        self._share_tokenizer()
        return self.first.save_artifacts(run_dir)

    def artifacts(self) -> dict:
        """Each task's artifacts (``tasks``), the shared tokenizer once (``tokenizer``)."""
        self._share_tokenizer()
        out: Dict[str, Any] = {"tasks": {}}
        for t, part in self.parts.items():
            art = dict(part.artifacts())
            if "tokenizer" in art:
                out["tokenizer"] = art.pop("tokenizer")
            out["tasks"][t] = art
        return out

    def setup_evaluation(self, run_dir, artifacts: dict, split: str) -> None:
        """Each task's ``setup_evaluation`` with its artifacts and the shared tokenizer."""
        per_task = artifacts.get("tasks") or {}
        for t, part in self.parts.items():
            art = {**(per_task.get(t) or {}), "tokenizer": artifacts.get("tokenizer")}
            part.setup_evaluation(run_dir, art, split)
        self._shared = False
        self._share_tokenizer(prepare=False)

    def model_context(self) -> dict:
        """The first task's context and ``tasks``: task → (interface, classes), a head each."""
        self._share_tokenizer()
        contexts = {t: dict(p.model_context()) for t, p in self.parts.items()}
        first = next(iter(contexts))
        out = {k: v for k, v in contexts[first].items() if k != "num_classes"}
        out["tasks"] = {t: (p.interface, int(contexts[t].get("num_classes", 0)))
                        for t, p in self.parts.items()}
        return out

    def label_names(self) -> Optional[Dict[str, List[str]]]:
        names = {t: p.label_names() for t, p in self.parts.items()}
        return {t: n for t, n in names.items() if n is not None} or None

    def task_context(self) -> dict:
        """``contexts``: task → its data's task context (classes, their names)."""
        return {"contexts": {t: dict(p.task_context()) for t, p in self.parts.items()}}

    def setup(self, stage: Optional[str] = None) -> None:
        self._share_tokenizer()
        for part in self.parts.values():
            part.setup(stage)

    def _task_loaders(self, split: str) -> Dict[str, Any]:
        self._share_tokenizer()
        loaders = {}
        for t, part in self.parts.items():
            part.trainer = self.trainer  # the epoch of bucketed shuffling (data.buckets)
            loaders[t] = {"train": part.train_dataloader, "val": part.val_dataloader,
                          "test": part.test_dataloader}[split]()
        return loaders

    def train_dataloader(self):
        loaders = self._task_loaders("train")
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            return CombinedLoader(loaders, "max_size_cycle")  # Lightning shards each task's loader
        return CycleLoader(loaders)

    def val_dataloader(self):
        return CombinedLoader(self._task_loaders("val"), "sequential")

    def test_dataloader(self):
        why = self.missing_test()
        if why:
            raise ValueError(why)
        return CombinedLoader(self._task_loaders("test"), "sequential")

    def without_test(self) -> None:
        """A run with test=false: no task's test file is read."""
        for part in self.parts.values():
            part.without_test()

    def missing_test(self) -> Optional[str]:
        for t, part in self.parts.items():
            why = part.missing_test()
            if why:
                return f"data.tasks.{t}: {why}"
        return None

    def example_batch(self, n: int, split: str = "val", ids: Optional[Sequence[int]] = None):
        """The first task's examples (dashboards)."""
        return self.first.example_batch(n, split, ids)
