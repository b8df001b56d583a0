"""What a run asks of the data modules, models and tasks its registries hold, as base classes.

Validation, the run, the sweep's checks and the tools call these methods and read these
attributes on any registered class; a base answers for a class that has nothing to say (no
interface, no limit, nothing to save). The registries ``data``, ``model`` and ``task`` register
only subclasses of :class:`DataContract`, :class:`ModelContract` and :class:`TaskContract`. They
live here, below every layer that asks, and need neither Lightning nor torch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Dict, List, Mapping, Optional, Sequence, Tuple, Union


class Composable:
    """A data module, model or task class: what it works on (its ``interface``, one of
    :data:`attnflow.training.validate.INTERFACES`) and the run configs it refuses."""

    #: what every config of the class works on; None: it does not say (it fits anything)
    interface: ClassVar[Optional[str]] = None
    #: the interfaces its configs work on when they differ by config (see :meth:`interface_of`)
    interfaces: ClassVar[Tuple[str, ...]] = ()
    #: the fields of each entry of a field that maps names to entries (task ``multitask``'s
    #: ``tasks.<name>.weight``): a plain override reaches them in an entry the YAML lacks
    entry_fields: ClassVar[Tuple[str, ...]] = ()
    #: the name it is registered under (set by the registry)
    registry_name: ClassVar[Optional[str]] = None

    @classmethod
    def interface_of(cls, fields: Mapping[str, Any]) -> Optional[str]:
        """What the block with these validated fields works on."""
        return cls.interface

    @classmethod
    def works_on(cls, interface: str) -> bool:
        """Whether some config of the class works on ``interface``."""
        return interface == cls.interface or interface in cls.interfaces

    @classmethod
    def check_config(cls, cfg: Mapping[str, Any]) -> None:
        """Refuse (``ConfigError``) or warn about a run config whose data, model and task are
        validated; called for the data, the model and the task the config names."""


class DataContract(Composable):
    """A data module: what validation asks of its class, and the run of its instance."""

    #: fields a trained model is bound to (attnflow-eval refuses another value than the run's)
    run_fixed: ClassVar[Tuple[str, ...]] = ()
    #: whether its labels are multi-label whatever the config; None: a ``multi_label`` field says
    known_multi_label: ClassVar[Optional[bool]] = None
    #: where the run keeps files (:meth:`set_run_dir`)
    run_dir: Optional[Path] = None
    #: the WordPiece tokenizer of a text data module (tasks show tokens with it); None: none
    tokenizer: Any = None
    #: the fields that name its data set (files, their label column): given other values, a
    #: preset's facts of its own data set no longer hold (:mod:`attnflow.config.own_data`)
    source_fields: ClassVar[Tuple[str, ...]] = ()
    #: the field that bounds an input's positions (a checkpoint's table may lower it)
    length_field: ClassVar[Optional[str]] = None

    @classmethod
    def data_set_facts(cls, fields: Mapping[str, Any]) -> List[str]:
        """The dotted fields of ``fields`` that hold facts of one data set (its classes)."""
        return ["labels"] if fields.get("labels") is not None else []

    @classmethod
    def check_files(cls, fields: Mapping[str, Any], test: bool = True) -> None:
        """Raise ``DataFileNotFoundError`` for a file the config names that is not there (nothing
        read; before a sweep's first job); ``test``: whether the test split is read too."""

    @classmethod
    def placeholder_context(cls, fields: Mapping[str, Any]) -> Optional[dict]:
        """The model's context (sizes) for these fields without reading data, to build the model
        on the meta device; None: the sizes need the data."""

    @classmethod
    def longest_positions(cls, fields: Mapping[str, Any]) -> Optional[Tuple[int, str]]:
        """The most positions a sequence model is given and why (``{at}`` stands for the data
        config's path); None: not bounded by the config."""

    @classmethod
    def longest_source_positions(cls, fields: Mapping[str, Any]) -> Optional[Tuple[int, str]]:
        """:meth:`longest_positions` of an encoder's inputs."""
        return cls.longest_positions(fields)

    @classmethod
    def one_vocabulary(cls, fields: Mapping[str, Any]) -> Optional[bool]:
        """Whether source and target share one vocabulary (tied embeddings); None: no pairs."""

    def without_test(self) -> None:
        """A run with test=false: no test file is read (it need not be there)."""

    def missing_test(self) -> Optional[str]:
        """Why there is no test split (the error's message), or None when there is one."""

    def set_run_dir(self, run_dir: Any) -> None:
        """Where the run keeps files (``<run_dir>/tokenizer/``): saved there, read back on resume."""
        self.run_dir = Path(run_dir)

    def prepare_tokenizer(self) -> None:
        """Make or load :attr:`tokenizer` (a data module with one)."""

    def save_artifacts(self, run_dir: Any) -> Optional[Path]:
        """Write what prediction needs besides the weights into ``run_dir`` (a vocabulary, a
        tokenizer); the file or folder written, None when nothing."""

    def artifacts(self) -> Dict[str, Any]:
        """What every checkpoint carries besides the weights (``attnflow_artifacts``)."""
        return {}

    def label_names(self) -> Optional[Union[List[str], Dict[str, List[str]]]]:
        """The classes the model predicts, named in its output order (a multitask: per task),
        which the run writes to ``labels.json``; None: it predicts no classes."""
        return None

    def setup_evaluation(self, run_dir: Any, artifacts: Dict[str, Any], split: str) -> None:
        """Ready ``split`` of a trained run (attnflow-eval): its vocabulary or tokenizer from
        ``run_dir``, else from the checkpoint's ``artifacts``."""

    def model_context(self) -> Dict[str, Any]:
        """The model's context: the sizes the data decides (vocabulary, classes, features)."""
        raise NotImplementedError

    def task_context(self) -> Dict[str, Any]:
        """The task's context: what it needs of the data (classes and their names)."""
        raise NotImplementedError

    def example_batch(self, n: int, split: str = "val", ids: Optional[Sequence[int]] = None) -> Any:
        """``n`` items of ``split`` as one batch, for dashboards and pictures; ``ids``: those
        items (indices into the split; graphs: node ids) instead."""
        raise NotImplementedError

    def text_batch(self, lines: Sequence[str]) -> Any:
        """``lines`` given by the user as one batch of :meth:`example_batch`'s form (translation:
        ``source<TAB>reference``); a data module without text input refuses."""
        raise ValueError(f"data '{self.registry_name}' takes no texts: choose its validation "
                         f"examples by number (attnflow-compare --ids)")


class ModelContract(Composable):
    """A model: what validation and the tasks ask of its class."""

    #: its encoder reads images (pixels or region features), not token sequences
    image_encoders: ClassVar[bool] = False
    #: it returns r attention hops as ``attention`` (a penalty on them is read)
    attention_hops: ClassVar[bool] = False
    #: how many hops its attention has (more than one: a picture shows their mean)
    hops: int = 1
    #: head (``model.head``) -> the interface a model with that head works on
    head_interfaces: ClassVar[Dict[str, str]] = {}
    #: the heads a multi-task model builds per task
    task_head_kinds: ClassVar[Tuple[str, ...]] = ()

    @classmethod
    def complete_config(cls, cfg: Dict[str, Any], typed: Mapping[str, str]) -> None:
        """Fill in the run config ``cfg`` the model fields that something else decides (a
        checkpoint); ``typed``: the fields given on the command line."""


class TaskContract(Composable):
    """A task: the model it trains, the metrics it logs, which one ranks checkpoints, and how."""

    model: Any  # (an instance's)
    #: metric name -> 'min' or 'max', logged as ``{train,val,test}/<name>``
    metrics: Dict[str, str] = {"loss": "min"}
    monitor: ClassVar[str] = "val/loss"
    monitor_mode: ClassVar[str] = "min"
    #: metrics logged only where a field of the task is above 0 ({metric: field})
    conditional_metrics: ClassVar[Dict[str, str]] = {}

    @classmethod
    def completed_task(cls, cfg: Mapping[str, Any]) -> Mapping[str, Any]:
        """The task config ``cfg["task"]`` of the run config ``cfg`` with the fields its data
        decides filled in (task ``multitask``: an entry per task of its data); the run records
        and builds this one."""
        return cfg["task"]

    @classmethod
    def metric_names(cls, splits: Sequence[str] = ("train", "val")) -> List[str]:
        """``<split>/<metric>`` for every metric the task logs."""
        return [f"{s}/{m}" for s in splits for m in cls.metrics]

    @classmethod
    def metric_names_of(cls, task_cfg: Mapping[str, Any],
                        splits: Sequence[str] = ("train", "val")) -> List[str]:
        """:meth:`metric_names` less a conditional metric whose field is 0 in ``task_cfg``."""
        off = {m for m, field in cls.conditional_metrics.items() if not (task_cfg.get(field) or 0) > 0}
        return [n for n in cls.metric_names(splits) if n.split("/", 1)[1] not in off]
