"""Registries: the only way from a config name to a class.

One :class:`Registry` per block kind (``scorer``, ``normalizer``, ``aggregator``, ``attention``,
``encoder``, ``decoder``, ``model``, ``data``, ``task``, ``logger``). A block registers under a short name::

    @SCORERS.register("additive")
    class AdditiveScorer(Scorer):
        def __init__(self, query_dim: int, key_dim: int, *, hidden_dim: int = 128): ...

The block's *typed config* is derived from its constructor: every keyword-only parameter with a
type annotation and a default is a YAML field (it becomes a field of a generated dataclass,
``Registry.schema(name)``). Positional parameters are the *context* a parent block supplies
(dimensions, vocabulary sizes), never YAML. A field annotated ``BlockSpec["scorer"]`` holds the
config of a child block of that kind and is validated recursively.

``validate(cfg, path)`` checks a config tree before anything is built or loaded; errors are
:class:`ConfigError` naming the block kind, the block, the field and the config path, and listing
what is allowed. Third-party packages register blocks through the ``attnflow.blocks`` entry-point
group: each entry point names a module (imported for its ``register`` decorators) or a callable
(called once).
"""

from __future__ import annotations

import dataclasses
import difflib
import inspect
import typing
from importlib import metadata
from typing import Any, Callable, Dict, Mapping, Optional

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

ENTRY_POINT_GROUP = "attnflow.blocks"


class ConfigError(ValueError):
    """A config names an unknown block or has a bad field. The message is meant for the user."""


class _BlockKind:
    def __init__(self, kind: str):
        self.kind = kind

    def __repr__(self) -> str:
        return f"BlockSpec[{self.kind!r}]"


class BlockSpec:
    """Annotation for a field that holds a child block's config: ``BlockSpec["scorer"]``."""

    def __class_getitem__(cls, kind: str):
        return typing.Annotated[Any, _BlockKind(kind)]


def _block_kind(annotation: Any) -> Optional[str]:
    for meta in getattr(annotation, "__metadata__", ()):
        if isinstance(meta, _BlockKind):
            return meta.kind
    return None


def _to_dict(cfg: Any) -> Dict[str, Any]:
    if isinstance(cfg, DictConfig):
        return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]
    if dataclasses.is_dataclass(cfg):
        return dataclasses.asdict(cfg)
    if isinstance(cfg, Mapping):
        return dict(cfg)
    if isinstance(cfg, str):  # shorthand: just the name
        return {"name": cfg}
    raise ConfigError(f"expected a mapping with a 'name' field, got {type(cfg).__name__}: {cfg!r}")


def _suggest(word: str, options) -> str:
    close = difflib.get_close_matches(word, list(options), n=1)
    return f" Did you mean '{close[0]}'?" if close else ""


class Registry:
    """Maps short names to block classes of one kind, with typed configs."""

    _all: Dict[str, "Registry"] = {}

    def __init__(self, kind: str):
        if kind in Registry._all:
            raise ValueError(f"a registry for kind '{kind}' exists already")
        self.kind = kind
        self._classes: Dict[str, type] = {}
        self._schemas: Dict[str, type] = {}
        self._children: Dict[str, Dict[str, str]] = {}
        self._choices: Dict[str, Dict[str, tuple]] = {}
        Registry._all[kind] = self

    # -- registration -----------------------------------------------------------------------
    def register(self, name: str) -> Callable[[type], type]:
        def deco(cls: type) -> type:
            if name in self._classes:
                raise ValueError(
                    f"{self.kind} '{name}' is registered already (by {self._classes[name].__module__}."
                    f"{self._classes[name].__qualname__}); pick another name"
                )
            schema, children, choices = _schema_from_init(cls, f"{self.kind}.{name}")
            self._schemas[name], self._children[name], self._choices[name] = schema, children, choices
            self._classes[name] = cls
            cls.registry_name = name
            return cls

        return deco

    # -- lookup ------------------------------------------------------------------------------
    def names(self):
        load_plugins()
        return sorted(self._classes)

    def get(self, name: str, path: str = "") -> type:
        load_plugins()
        if name not in self._classes:
            where = f" at '{path}.name'" if path else ""
            raise ConfigError(
                f"unknown {self.kind} '{name}'{where}. Registered {self.kind}s: "
                f"{', '.join(sorted(self._classes)) or '(none)'}.{_suggest(name, self._classes)}"
            )
        return self._classes[name]

    def schema(self, name: str) -> type:
        self.get(name)
        return self._schemas[name]

    def fields(self, name: str):
        """[(field, type string, default)] of a block's typed config."""
        out = []
        for f in dataclasses.fields(self.schema(name)):
            default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
            kind = self._children[name].get(f.name)
            choices = self._choices[name].get(f.name)
            tname = f"BlockSpec[{kind}]" if kind else _type_name(f.type)
            if choices:
                tname = " | ".join(repr(c) for c in choices)
            out.append((f.name, tname, default))
        return out

    # -- validation and building ----------------------------------------------------------------
    def validate(self, cfg: Any, path: str = "") -> Dict[str, Any]:
        """Check ``cfg`` against the block's typed config; return it as a plain dict with defaults.

        Child blocks (fields annotated ``BlockSpec[kind]``) are validated recursively.
        """
        path = path or self.kind
        data = _to_dict(cfg)
        if "name" not in data or data["name"] in (None, ""):
            raise ConfigError(
                f"'{path}' needs a 'name': one of the registered {self.kind}s: {', '.join(self.names())}"
            )
        name = data.pop("name")
        if not isinstance(name, str):
            raise ConfigError(f"'{path}.name' must be a string naming a {self.kind}, got {name!r}")
        self.get(name, path)
        schema = self._schemas[name]
        allowed = [f.name for f in dataclasses.fields(schema)]
        for key in data:
            if key not in allowed:
                raise ConfigError(
                    f"{self.kind} '{name}' has no field '{key}' (at '{path}.{key}'). "
                    f"Its fields: {', '.join(allowed) or '(none)'}.{_suggest(key, allowed)}"
                )
        children = self._children[name]
        plain = {k: v for k, v in data.items() if k not in children}
        try:
            typed = OmegaConf.merge(OmegaConf.structured(schema), plain)
        except OmegaConfBaseException as err:
            key = getattr(err, "key", None) or getattr(err, "full_key", None) or "?"
            ftype = {f.name: _type_name(f.type) for f in dataclasses.fields(schema)}.get(str(key), "?")
            raise ConfigError(
                f"{self.kind} '{name}': field '{key}' (at '{path}.{key}') must be {ftype}, "
                f"got {plain.get(str(key))!r}"
            ) from None
        out = OmegaConf.to_container(typed)
        for key, choices in self._choices[name].items():
            if out[key] not in choices:
                raise ConfigError(
                    f"{self.kind} '{name}': field '{key}' (at '{path}.{key}') must be one of "
                    f"{', '.join(repr(c) for c in choices)}, got {out[key]!r}.{_suggest(str(out[key]), map(str, choices))}"
                )
        for key, kind in children.items():
            child = data.get(key, out.get(key))
            out[key] = None if child is None else Registry._all[kind].validate(child, f"{path}.{key}")
        out["name"] = name
        return out

    def build(self, cfg: Any, *context: Any, path: str = "", **extra: Any):
        """Validate ``cfg`` and construct the block: ``Class(*context, **fields, **extra)``."""
        data = self.validate(cfg, path)
        name = data.pop("name")
        return self._classes[name](*context, **data, **extra)

    def __contains__(self, name: str) -> bool:
        load_plugins()
        return name in self._classes

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {sorted(self._classes)})"

    @classmethod
    def kinds(cls) -> Dict[str, "Registry"]:
        load_plugins()
        return dict(cls._all)


def _type_name(tp: Any) -> str:
    if isinstance(tp, str):
        return tp
    if typing.get_origin(tp) is not None:  # Optional[int], List[str], ...
        return str(tp).replace("typing.", "")
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def _schema_from_init(cls: type, qualname: str):
    """Build the typed-config dataclass from the keyword-only parameters of ``cls.__init__``."""
    init = cls.__init__ if isinstance(cls, type) else cls  # a class, or a factory function
    sig = inspect.signature(init)
    hints = typing.get_type_hints(init, include_extras=True)
    fields, children, choices = [], {}, {}
    for p in sig.parameters.values():
        if p.kind is not inspect.Parameter.KEYWORD_ONLY:
            continue
        if p.name not in hints:
            raise TypeError(f"{qualname}: keyword-only parameter '{p.name}' needs a type annotation")
        if p.default is inspect.Parameter.empty:
            raise TypeError(f"{qualname}: keyword-only parameter '{p.name}' needs a default")
        tp, default = hints[p.name], p.default
        kind = _block_kind(tp)
        if kind is not None:
            children[p.name] = kind
            tp = Any
        if typing.get_origin(tp) is typing.Literal:
            choices[p.name] = typing.get_args(tp)
            tp = type(choices[p.name][0])
        if isinstance(default, (dict, list)):
            fields.append((p.name, tp, dataclasses.field(default_factory=lambda d=default: d)))
        else:
            fields.append((p.name, tp, dataclasses.field(default=default)))
    schema = dataclasses.make_dataclass(qualname.replace(".", "_") + "_config", fields)
    return schema, children, choices


_plugins_loaded = False


def load_plugins() -> None:
    """Import third-party blocks from the ``attnflow.blocks`` entry-point group (once)."""
    global _plugins_loaded
    if _plugins_loaded:
        return
    _plugins_loaded = True
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        try:
            obj = ep.load()
        except Exception as err:  # a broken plugin must not hide the others
            raise ConfigError(f"could not load attnflow plugin '{ep.name}' ({ep.value}): {err}") from err
        if callable(obj) and not isinstance(obj, type):
            obj()


def reload_plugins() -> None:
    """Forget that plugins were loaded (for tests that install a plugin at run time)."""
    global _plugins_loaded
    _plugins_loaded = False


SCORERS = Registry("scorer")
NORMALIZERS = Registry("normalizer")
AGGREGATORS = Registry("aggregator")
ATTENTIONS = Registry("attention")
ENCODERS = Registry("encoder")
DECODERS = Registry("decoder")
MODELS = Registry("model")
DATA = Registry("data")
TASKS = Registry("task")
LOGGERS = Registry("logger")
POOLINGS = Registry("pooling")
POSITIONALS = Registry("positional")
GRAPH_LAYERS = Registry("graph_layer")  # message-passing layers: (x (N, F), edge_index (2, E)) -> (N, D′)
