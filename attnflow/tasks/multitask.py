"""Multi-task learning: one shared encoder, a head and a loss per task, trained on Σ_t λ_t L_t.

Caruana (1997); Liu et al. (2019, MT-DNN) share the BERT encoder among task-specific heads.

    L(θ) = Σ_t λ_t L_t(θ_enc, θ_t),     λ_t ≥ 0 (``task.tasks.<t>.weight``), some λ_t > 0,

L_t the loss of task t's own registered task on a batch of its data. Each training step takes a
batch of every task (data ``multitask``), so a step follows the gradient of the sum; λ_t = 0 keeps
a task measured but untrained. ``tasks`` is a mapping (overridable item by item) of
``{weight, task: <task config>}``; ``task.optim`` trains all. A task sees the model through
:class:`TaskView` (the encoder and its own head). Metrics: ``{split}/{task}/{metric}`` and
``{split}/loss`` = Σ_t λ_t L_t (val/test: of each task's mean loss over its split).
"""

from __future__ import annotations

import functools
import math
from typing import Any, Dict, Mapping, Optional, Sequence

import torch
from omegaconf import DictConfig, OmegaConf
from pytorch_lightning.utilities.data import extract_batch_size
from torch import nn
from torchmetrics import MeanMetric

from attnflow.config.registry import DATA, MODELS, TASKS, ConfigError, suggest
from attnflow.data.multitask import MultiTaskDataModule
from attnflow.io.console import warn_unread
from attnflow.tasks.base import Task, updated_on_any_rank
from attnflow.tasks.optim import OptimConfig, attached_trainer
from attnflow.viz.panels import Dashboard

ENTRY_FIELDS = ("weight", "task")


def _plain(cfg: Any) -> Any:
    return OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else cfg


def _task_for(data_name: Any) -> Optional[str]:
    """The task of data module ``data_name``'s data: the one registered task other than
    ``multitask`` that works on what it gives (text_classification for labelled texts,
    token_classification for tagged sentences), else None."""
    if not isinstance(data_name, str) or data_name not in DATA:
        return None
    gives = DATA.get(data_name).interface
    fits = [n for n in TASKS.names() if n != "multitask" and gives and TASKS.get(n).interface == gives]
    return fits[0] if len(fits) == 1 else None


def _completed_entry(entry: Any, default: Optional[str]) -> Any:
    """A ``task.tasks`` entry with its data's task ``default``: none (null) is ``{weight: 1,
    task: {name: default}}``; one without ``task``, or whose task names none, gets that name.
    Anything else as it is (``task_entries`` judges it); so is every entry without ``default``."""
    entry = {} if entry is None else dict(entry) if isinstance(entry, Mapping) else entry
    sub = entry.get("task") if isinstance(entry, dict) else False
    if not default or not (sub is None or (isinstance(sub, dict) and not sub.get("name"))):
        return entry
    return {"weight": entry.get("weight", 1.0), **entry, "task": {"name": default, **(sub or {})}}


class TaskView(nn.Module):
    """The shared model as one task sees it: ``<kind>_logits`` called with ``task=<name>``, other
    attributes the model's. Not a submodule (the weights belong to the multitask task once)."""

    def __init__(self, model: nn.Module, task: str):
        super().__init__()
        object.__setattr__(self, "_shared", model)
        self.task = task
        self.head = model.head_of_task[task]

    def forward(self, *args, **kwargs):
        return self._shared(*args, **kwargs)

    def __getattr__(self, name: str):
        try:
            return super().__getattr__(name)
        except AttributeError:
            pass
        value = getattr(object.__getattribute__(self, "_shared"), name)
        if name.endswith("_logits") and callable(value):
            return functools.partial(value, task=object.__getattribute__(self, "task"))
        return value


class _TaskLog:
    """A task's ``log``: ``<split>/<metric>`` logged as ``<split>/<task>/<metric>``."""

    def __init__(self, owner: "MultiTask", task: str):
        self.owner, self.task = owner, task

    def __call__(self, name: str, value: Any, **kwargs) -> None:
        split, _, metric = name.partition("/")
        kwargs.setdefault("add_dataloader_idx", False)
        self.owner.log(f"{split}/{self.task}/{metric}", value, **kwargs)

    def many(self, values: Mapping[str, Any], **kwargs) -> None:
        for name, value in values.items():
            self(name, value, **kwargs)


@TASKS.register("multitask")
class MultiTask(Task):
    """Σ_t λ_t L_t over named tasks on one shared model (module docstring)."""

    interface = "multitask"
    entry_fields = ENTRY_FIELDS  # task.tasks.<t>.weight reaches a task the YAML does not list
    metrics = {"loss": "min"}  # the class's; an instance adds "<task>/<metric>" for its tasks
    monitor, monitor_mode = "val/loss", "min"

    def __init__(self, model: nn.Module, contexts: Optional[Dict[str, dict]] = None, *,
                 tasks: Dict[str, Any] = {},
                 optim: OptimConfig = OptimConfig(optimizer="adamw", lr=3e-5, weight_decay=0.01,
                                                  scheduler="linear", warmup_steps=100,
                                                  decay_bias_and_norm=False)):
        super().__init__(model, optim=optim)
        entries, contexts = self.task_entries(tasks), contexts or {}
        self.weights = {t: e["weight"] for t, e in entries.items()}
        self.subtasks = nn.ModuleDict()
        for t, e in entries.items():
            sub = TASKS.build(e["task"], TaskView(model, t), path=f"task.tasks.{t}.task", **contexts[t])
            sub.log, sub.log_dict = _TaskLog(self, t), _TaskLog(self, t).many
            self.subtasks[t] = sub
        self.metrics = {"loss": "min", **{f"{t}/{m}": mode for t, e in entries.items()
                                          for m, mode in TASKS.get(e["task"]["name"]).metrics.items()}}
        # each task's mean loss over a validation or test split, for Σ λ_t mean_t
        self._split_loss = nn.ModuleDict({s: nn.ModuleDict({t: MeanMetric() for t in entries})
                                          for s in ("val", "test")})
        self.loader_order = list(entries)  # validation/test dataloader_idx -> task (data's order)

    # -- config ------------------------------------------------------------------------------------
    @classmethod
    def task_entries(cls, tasks: Any, path: str = "task.tasks") -> Dict[str, Dict[str, Any]]:
        """{task: {'weight': λ, 'task': validated task config}}."""
        tasks = _plain(tasks)
        if not isinstance(tasks, Mapping) or not tasks:
            raise ConfigError(f"'{path}' must map at least one task to {{weight, task}}, e.g. "
                              f"{path}.polarity={{task: {{name: text_classification}}}}")
        out: Dict[str, Dict[str, Any]] = {}
        for t, entry in tasks.items():
            where, entry = f"{path}.{t}", _plain(entry) or {}
            for key in entry:
                if key not in ENTRY_FIELDS:
                    raise ConfigError(f"'{where}' has no field '{key}' (at '{where}.{key}'); its "
                                      f"fields: weight, task.{suggest(str(key), ENTRY_FIELDS)}")
            weight = entry.get("weight", 1.0)
            if (isinstance(weight, bool) or not isinstance(weight, (int, float))
                    or not math.isfinite(weight) or weight < 0):
                raise ConfigError(f"the weight of task '{t}' (at '{where}.weight') must be a "
                                  f"finite number >= 0, got {weight!r}")
            sub = entry.get("task") or {}
            if "optim" in sub:
                warn_unread(f"{where}.task.optim", "task.optim trains all tasks")
            out[t] = {"weight": float(weight), "task": TASKS.validate(sub, f"{where}.task")}
        if not any(e["weight"] > 0 for e in out.values()):
            raise ConfigError(f"every weight in {path} is 0: nothing would be trained")
        return out

    @classmethod
    def completed_task(cls, cfg: Mapping[str, Any]) -> Mapping[str, Any]:
        """``task.tasks`` with an entry for each task of multitask data (``data.tasks.<t>``), in
        the data's order, then the entries that name no data (which :meth:`check_config`
        refuses): a task's entry is completed by :func:`_completed_entry` with its data's task."""
        task, data = _plain(cfg["task"]), cfg.get("data")
        given = task.get("tasks")
        name = data.get("name") if isinstance(data, (Mapping, DictConfig)) else None
        if (given is not None and not isinstance(given, Mapping)) or not isinstance(name, str) \
                or name not in DATA or not issubclass(DATA.get(name), MultiTaskDataModule):
            return task  # (no tasks of data to complete from: task_entries judges them)
        given, kinds = dict(given or {}), MultiTaskDataModule.task_data_names(data)
        order = [*kinds, *(t for t in given if t not in kinds)]
        return {**task, "tasks": {t: _completed_entry(given.get(t), _task_for(kinds.get(t))) for t in order}}

    @classmethod
    def check_config(cls, cfg: Mapping[str, Any]) -> None:
        """Each task has data of its kind under the same name, and the model a head of its kind."""
        data_cls, model_cls = DATA.get(cfg["data"]["name"]), MODELS.get(cfg["model"]["name"])
        multitask = (issubclass(data_cls, MultiTaskDataModule)
                     and model_cls.interface_of(cfg["model"]) == "multitask")
        data = data_cls.task_configs(cfg["data"]) if multitask else {}
        if multitask and not data:
            raise ConfigError("data.tasks names no task: give each task's data fields, e.g. "
                              "data.tasks.sentiment.label_field=sentiment (its label column)")
        given = cfg["task"].get("tasks")
        if multitask and isinstance(given, Mapping) and set(given) != set(data):
            raise ConfigError(f"task.tasks and data.tasks must name the same tasks: data.tasks "
                              f"lacks {', '.join(t for t in given if t not in data) or '-'}; "
                              f"task.tasks lacks {', '.join(t for t in data if t not in given) or '-'}")
        entries = cls.task_entries(given)
        if not multitask:
            return  # not data and a model of several tasks: the interface check names the misfit
        heads = model_cls.head_interfaces
        by_interface = {i: h for h, i in heads.items()}
        per_task = model_cls.task_head_kinds
        for t, e in entries.items():
            name = e["task"]["name"]
            task_iface = TASKS.get(name).interface_of(e["task"])
            data_iface = DATA.get(data[t]["name"]).interface_of(data[t])
            if task_iface and data_iface and task_iface != data_iface:
                raise ConfigError(f"task.tasks.{t}: task '{name}' works on {task_iface}, but its data "
                                  f"(data.tasks.{t}: '{data[t]['name']}') gives {data_iface}")
            need = by_interface.get(task_iface or data_iface)
            if need not in per_task:
                raise ConfigError(
                    f"task.tasks.{t}: task '{name}' works on {task_iface or data_iface}, which needs "
                    f"a '{need}' head; model '{cfg['model']['name']}' builds per task only "
                    f"{', '.join(f'{h} ({heads.get(h)})' for h in per_task) or 'none'}")

    @classmethod
    def metric_names_of(cls, task_cfg: Mapping[str, Any], splits: Sequence[str] = ("train", "val")) -> list:
        """``{split}/loss`` and ``{split}/{task}/{metric}`` for each task of this config."""
        entries = cls.task_entries(_plain(task_cfg).get("tasks"))
        names = [f"{s}/{m}" for s in splits for m in cls.metrics]
        for t, e in entries.items():
            names += [n.replace("/", f"/{t}/", 1)
                      for n in TASKS.get(e["task"]["name"]).metric_names_of(e["task"], splits)]
        return names

    # -- steps -------------------------------------------------------------------------------------
    def step(self, batch: Mapping[str, Any], split: str) -> torch.Tensor:
        """Σ_t λ_t L_t of a combined batch {task: its batch}; each task logs its own metrics."""
        losses = {t: self.subtasks[t].step(b, split) for t, b in batch.items()}
        total = sum(self.weights[t] * loss for t, loss in losses.items())
        if split == "train":
            n = sum(extract_batch_size(b) for b in batch.values())
            self.log("train/loss", total, batch_size=n, prog_bar=True)
        return total

    def setup(self, stage: str) -> None:
        """Evaluation loaders come in the data module's ``task_names`` order; each task sees the
        trainer (Lightning attaches it to direct children only)."""
        dm = self.data_module()
        if isinstance(dm, MultiTaskDataModule):
            self.loader_order = dm.task_names
        for sub in self.subtasks.values():
            sub.trainer = attached_trainer(self)

    def _split_step(self, batch: Any, dataloader_idx: int, split: str) -> None:
        t = self.loader_order[dataloader_idx]
        loss = self.subtasks[t].step(batch, split)
        self._split_loss[split][t].update(loss.detach().float(), weight=extract_batch_size(batch))

    def validation_step(self, batch, batch_idx, dataloader_idx: int = 0):
        self._split_step(batch, dataloader_idx, "val")

    def test_step(self, batch, batch_idx, dataloader_idx: int = 0):
        self._split_step(batch, dataloader_idx, "test")

    def _log_split_loss(self, split: str) -> None:
        """``{split}/loss`` = Σ_t λ_t (task t's mean loss over the split), every rank's batches."""
        means = self._split_loss[split]
        seen = [t for t, m in means.items() if updated_on_any_rank(m, attached_trainer(self))]
        if seen:
            self.log(f"{split}/loss", sum(self.weights[t] * means[t].compute() for t in seen),
                     prog_bar=split == "val")
        for m in means.values():
            m.reset()

    def on_validation_epoch_end(self) -> None:
        self._log_split_loss("val")

    def on_test_epoch_end(self) -> None:
        self._log_split_loss("test")

    def dashboard(self, batch) -> list:
        """The first task's dashboard (``example_batch`` is its), keys under the task's name."""
        t = self.loader_order[0]
        sub = self.subtasks[t]
        if not isinstance(sub, Dashboard):
            return []
        panels = sub.dashboard(batch)
        for p in panels:
            if isinstance(p.get("key"), str) and "/" in p["key"]:
                split, rest = p["key"].split("/", 1)
                p["key"] = f"{split}/{t}/{rest}"
        return panels
