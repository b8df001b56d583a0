"""Multi-task learning: one shared encoder, a head and a loss per task, trained on Σ_t λ_t L_t.

Caruana (1997, "Multitask learning") trains related tasks together on a shared representation;
Liu et al. (2019, MT-DNN, "Multi-task deep neural networks for natural language understanding")
share the BERT encoder (Devlin et al. 2019) among task-specific output layers. The objective here
is the weighted sum of the tasks' own losses,

    L(θ) = Σ_t λ_t L_t(θ_enc, θ_t),     λ_t ≥ 0 (``task.tasks.<t>.weight``), some λ_t > 0,

where L_t is what task t's registered task (e.g. ``text_classification``: the mean cross-entropy
of its head) computes on a batch of task t's data, and θ_t its head's weights. MT-DNN draws one
task per mini-batch; here every training step takes one batch of *every* task (the data module
``multitask``), so each optimiser step follows the gradient of the weighted sum itself. λ_t = 0
keeps a task in the run (its training metrics are still logged, it is validated) without
training on it: its head gets no gradient.

Config: ``tasks`` is a mapping (a Hydra list cannot be overridden item by item; a mapping can:
``task.tasks.rating.weight=0.5``), in the order of the YAML::

    tasks:
      polarity: {weight: 1.0, task: {name: text_classification}}
      rating:   {weight: 0.5, task: {name: text_classification, label_smoothing: 0.1}}

``task`` is a task config validated by the registry as in a single-task run; the optimiser is this task's (``task.optim``) for
all of them. Each task's data is ``data.tasks.<t>`` of data ``multitask``, the same task names.
The model builds one head per task (``model=bert model.head=multitask``: a sequence head for
labelled texts) on the one encoder; a task sees the model through :class:`TaskView`, the encoder
and its own head, so its ``step`` runs unchanged.

Metrics: each task's, as ``{split}/{task}/{metric}`` (``val/polarity/acc``, ``val/rating/f1``),
and ``{split}/loss`` = Σ_t λ_t L_t (in validation and test: λ-weighted sum of each task's mean loss
over its whole split). The checkpoint metric is ``val/loss`` (min): the objective being trained,
defined whatever the tasks are; ``callbacks.checkpoint.monitor=val/rating/acc`` picks one task's.
"""

from __future__ import annotations

import functools
import math
import re
import warnings
from typing import Any, Dict, Mapping, Optional, Sequence

import torch
from torch import nn
from torchmetrics import MeanMetric

from attnflow.tasks.base import updated_on_any_rank
from attnflow.config.registry import DATA, MODELS, TASKS, AttnflowWarning, ConfigError, suggest
from attnflow.tasks.base import Task
from attnflow.tasks.optim import OptimConfig

ENTRY_FIELDS = ("weight", "task")
_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")


def _plain(cfg: Any) -> Any:
    from omegaconf import DictConfig, OmegaConf

    return OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else cfg


def _interface(cls: Any, cfg: Mapping[str, Any]) -> Optional[str]:
    of = getattr(cls, "interface_of", None)
    return of(cfg) if of is not None else getattr(cls, "interface", None)


class TaskView(nn.Module):
    """The shared model as one task sees it: ``forward`` is the shared encoder, ``<kind>_logits``
    the task's own head (the model's method called with ``task=<name>``), ``head`` that head's kind;
    other attributes are the model's. The model is not a submodule here (its weights belong to the
    multitask task's ``model`` once, not again under every task)."""

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
    """A task's ``log``: its ``<split>/<metric>`` logged by the multitask task as
    ``<split>/<task>/<metric>`` (one name per validation loader, no ``/dataloader_idx_N``)."""

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
    """Σ_t λ_t L_t over named tasks on one shared model (module docstring).

    Args:
        model: a model with one head per task (``head_of_task``, logits methods taking
            ``task=``; ``model=bert model.head=multitask``) (context).
        contexts: task → its data's task context (classes, their names) (context, from the data
            module ``multitask``).
        tasks: task name → {weight: λ_t ≥ 0 (default 1.0), task: a task config}, in order
            (at least one).
        optim: optimiser and schedule of all tasks (default as text_classification: AdamW, peak
            lr 3e-5 after 100 linear warm-up steps, then linear decay to 0, weight decay 0.01
            except on biases and norms).
    """

    interface = "multitask"
    metrics = {"loss": "min"}  # the class's; an instance adds "<task>/<metric>" for its tasks
    monitor, monitor_mode = "val/loss", "min"

    def __init__(self, model: nn.Module, contexts: Optional[Dict[str, dict]] = None, *,
                 tasks: Dict[str, Any] = {},
                 optim: OptimConfig = OptimConfig(optimizer="adamw", lr=3e-5, weight_decay=0.01,
                                                  scheduler="linear", warmup_steps=100,
                                                  decay_bias_and_norm=False)):
        super().__init__(model, optim=optim)
        entries = self.task_entries(tasks)
        contexts = dict(contexts or {})
        if set(contexts) != set(entries):
            raise ConfigError(f"task.tasks names {', '.join(entries)} but the data gives "
                              f"{', '.join(contexts) or 'no tasks'} (data.tasks): the same names")
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
        """{task: {'weight': λ, 'task': validated task config}}; a :class:`ConfigError` naming
        the path of anything wrong."""
        tasks = _plain(tasks)
        if not isinstance(tasks, Mapping) or not tasks:
            raise ConfigError(f"'{path}' must name at least one task: a mapping task → {{weight, "
                              f"task}}, e.g. {path}.polarity={{weight: 1.0, task: {{name: "
                              f"text_classification}}}}")
        out: Dict[str, Dict[str, Any]] = {}
        for t, entry in tasks.items():
            where = f"{path}.{t}"
            if not isinstance(t, str) or not _NAME.match(t) or hasattr(nn.ModuleDict(), t):
                raise ConfigError(f"'{where}': a task name is a metric name and a module name: "
                                  f"letters, digits and _, starting with a letter, and not a "
                                  f"method of torch's ModuleDict (e.g. 'train', 'keys')")
            entry = _plain(entry) if entry is not None else {}
            if not isinstance(entry, Mapping):
                raise ConfigError(f"'{where}' must be a mapping with the fields "
                                  f"{', '.join(ENTRY_FIELDS)}; got {entry!r}")
            for key in entry:
                if key not in ENTRY_FIELDS:
                    raise ConfigError(f"task 'multitask': {where} has no field '{key}' (at "
                                      f"'{where}.{key}'). Its fields: {', '.join(ENTRY_FIELDS)}."
                                      f"{suggest(str(key), ENTRY_FIELDS)}")
            weight = entry.get("weight", 1.0)
            if (isinstance(weight, bool) or not isinstance(weight, (int, float))
                    or not math.isfinite(weight) or weight < 0):
                raise ConfigError(f"task 'multitask': the weight λ of task '{t}' (at "
                                  f"'{where}.weight') must be a finite number >= 0, got {weight!r}")
            sub = entry.get("task")
            if not isinstance(sub, Mapping) or not sub.get("name"):
                raise ConfigError(f"'{where}.task' needs a task config with a name, e.g. "
                                  f"{where}.task={{name: text_classification}}; registered tasks: "
                                  f"{', '.join(n for n in TASKS.names() if n != 'multitask')}")
            if sub.get("name") == "multitask":
                raise ConfigError(f"'{where}.task.name': a task of a multitask run cannot be "
                                  f"multitask itself")
            if "optim" in sub:
                warnings.warn(f"{where}.task.optim is unread: task.optim trains all tasks",
                              AttnflowWarning)
            out[t] = {"weight": float(weight), "task": TASKS.validate(sub, f"{where}.task")}
        if not any(e["weight"] > 0 for e in out.values()):
            raise ConfigError(f"task 'multitask': every weight in {path} is 0, so nothing would be "
                              f"trained; give at least one task a weight > 0")
        return out

    @classmethod
    def check_config(cls, cfg: Mapping[str, Any]) -> None:
        """The tasks, their data and the model's heads fit: each task has data of the kind it works on, under the same name, and the model
        builds a head of that kind per task."""
        entries = cls.task_entries(cfg["task"].get("tasks"))
        data_cls = DATA.get(cfg["data"]["name"], "data")
        if not hasattr(data_cls, "task_configs"):
            raise ConfigError(f"task 'multitask' takes data=multitask (one data config per task, "
                              f"data.tasks.<task>), got data '{cfg['data']['name']}'")
        data = data_cls.task_configs(cfg["data"])
        if set(data) != set(entries):
            missing = [t for t in entries if t not in data]
            extra = [t for t in data if t not in entries]
            raise ConfigError(
                "task.tasks and data.tasks must name the same tasks: "
                + "; ".join([f"data.tasks lacks {', '.join(missing)}" if missing else "",
                             f"task.tasks lacks {', '.join(extra)}" if extra else ""]).strip("; "))
        model_cls = MODELS.get(cfg["model"]["name"], "model")
        model_iface = _interface(model_cls, cfg["model"])
        heads = getattr(model_cls, "head_interfaces", {})
        if model_iface != "multitask":
            fit = [h for h, i in heads.items() if i == "multitask"]
            raise ConfigError(
                "task 'multitask' needs a model with one head per task: "
                + (f"set model.head={fit[0]} (model '{cfg['model']['name']}', now "
                   f"model.head={cfg['model'].get('head')})" if fit else
                   f"model '{cfg['model']['name']}' has none (model=bert model.head=multitask)"))
        by_interface = {i: h for h, i in heads.items()}
        per_task = getattr(model_cls, "task_head_kinds", ())
        for t, e in entries.items():
            name = e["task"]["name"]
            task_iface = _interface(TASKS.get(name), e["task"])
            data_iface = _interface(DATA.get(data[t]["name"]), data[t])
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
        for t, e in entries.items():  # each task's own, with its conditional metrics (penalty)
            names += [n.replace("/", f"/{t}/", 1)
                      for n in TASKS.get(e["task"]["name"]).metric_names_of(e["task"], splits)]
        return names

    # -- steps -------------------------------------------------------------------------------------
    def step(self, batch: Mapping[str, Any], split: str) -> torch.Tensor:
        """Σ_t λ_t L_t of a combined batch {task: its batch} (each task's ``step`` logs its own
        metrics); logged as ``train/loss`` in training."""
        losses = {t: self.subtasks[t].step(b, split) for t, b in batch.items()}
        total = sum(self.weights[t] * loss for t, loss in losses.items())
        if split == "train":
            from pytorch_lightning.utilities.data import extract_batch_size

            n = sum(extract_batch_size(b) for b in batch.values())
            self.log("train/loss", total, batch_size=n, prog_bar=True)
        return total

    def setup(self, stage: str) -> None:
        """Validation and test loaders come in the data module's task order (``task_names``);
        each task sees the trainer (and so the data module, e.g. its tokenizer)."""
        dm = getattr(self.trainer, "datamodule", None) if self._trainer is not None else None
        order = list(getattr(dm, "task_names", None) or self.loader_order)
        if sorted(order) != sorted(self.subtasks):
            raise ConfigError(f"the data gives tasks {', '.join(order)}, the task has "
                              f"{', '.join(self.subtasks)}")
        self.loader_order = order
        for sub in self.subtasks.values():  # Lightning attaches the trainer to direct children
            sub._trainer = self._trainer  # only; a task reads its data through it (dashboards)

    def _split_step(self, batch: Any, dataloader_idx: int, split: str) -> None:
        from pytorch_lightning.utilities.data import extract_batch_size

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
        seen = [t for t, m in means.items() if updated_on_any_rank(m, self._trainer)]  # compute()
        # syncs under DDP: every rank computes the same tasks' means, even with an empty shard
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
        """The first task's dashboard (the data module's ``example_batch`` is its), keys under
        the task's name; none when its task has none."""
        t = self.loader_order[0]
        sub = self.subtasks[t]
        if not hasattr(sub, "dashboard"):
            return []
        panels = sub.dashboard(batch)
        for p in panels:
            if isinstance(p.get("key"), str) and "/" in p["key"]:
                split, rest = p["key"].split("/", 1)
                p["key"] = f"{split}/{t}/{rest}"
        return panels
