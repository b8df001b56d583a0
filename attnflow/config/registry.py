"""Registries: the only way from a config name to a class.

One :class:`Registry` per block kind (``scorer``, ``encoder``, ``model``, ``data``, ``task``, ...).
A block registers under a short name, ``@SCORERS.register("additive")``, and its typed config is
its constructor: each keyword-only parameter (annotated, with a default) is a YAML field (a field
of the generated dataclass ``Registry.schema(name)``); positional parameters are the context a
parent supplies (dimensions, vocabulary sizes). ``BlockSpec["scorer"]`` holds a child block's
config, a dataclass annotation a nested config without a name, ``Range`` a numeric field's bounds
(:mod:`attnflow.config.types`). A subclass whose ``__init__`` passes ``**kwargs`` up inherits its
parents' fields. :meth:`Registry.validate` checks a config tree (unknown field, type, choice,
range) and raises :class:`ConfigError` naming the block, the field and the config path.

A registry imports every public module of its package(s) on its first lookup (a new block is one
new file); third-party blocks register through the ``attnflow.blocks`` entry-point group.
"""

from __future__ import annotations

import contextvars
import copy
import dataclasses
import difflib
import importlib
import inspect
import pkgutil
import typing
from importlib import metadata
from typing import Any, Callable, Dict, Mapping, Optional, Sequence, Union

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from attnflow.io.console import AttnflowWarning  # noqa: F401  (re-exported)
from attnflow.config.types import (  # noqa: F401  (the annotations blocks import from here)
    BlockSpec, NonNegativeFloat, NonNegativeInt, PositiveFloat, PositiveInt, Probability, Range,
    block_kind, choice_text, literal_choices, one_of, split_range, type_name)

ENTRY_POINT_GROUP = "attnflow.blocks"
_BUILDING = contextvars.ContextVar("building", default=False)  # inside Registry.create


class ConfigError(ValueError):
    """A config names an unknown block or has a bad field. The message is meant for the user."""


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


def suggest(word: str, options) -> str:
    close = difflib.get_close_matches(word, list(options), n=1)
    return f" Did you mean '{close[0]}'?" if close else ""


class Registry:
    """Maps short names to block classes of one kind, with typed configs."""

    _all: Dict[str, "Registry"] = {}

    def __init__(self, kind: str, packages: Union[str, Sequence[str]] = ()):
        """``packages``: the module(s) or package(s) whose modules hold the built-in blocks."""
        if kind in Registry._all:
            raise ValueError(f"a registry for kind '{kind}' exists already")
        self.kind = kind
        self.packages = (packages,) if isinstance(packages, str) else tuple(packages)
        self._discovered = False
        self._classes: Dict[str, type] = {}
        self._specs: Dict[str, _Spec] = {}  # name -> its typed config (schema, children, ...)
        Registry._all[kind] = self

    # -- registration -----------------------------------------------------------------------
    def register(self, name: str) -> Callable[[type], type]:
        def deco(cls: type) -> type:
            if name in self._classes:
                raise ValueError(
                    f"{self.kind} '{name}' is registered already (by {self._classes[name].__module__}."
                    f"{self._classes[name].__qualname__}); pick another name"
                )
            self._specs[name] = _build_schema(_init_params(cls, f"{self.kind}.{name}"), f"{self.kind}.{name}")
            self._classes[name] = cls
            cls.registry_name = name
            return cls

        return deco

    def unregister(self, name: str) -> None:  # (tests; a notebook cell that defines it again)
        for table in (self._classes, self._specs):
            table.pop(name, None)

    # -- lookup ------------------------------------------------------------------------------
    def discover(self) -> None:
        """Import the modules of this registry's packages (once), then the plugins."""
        if not self._discovered:
            self._discovered = True  # set first: a module being imported may look blocks up
            try:
                for package in self.packages:
                    _import_all(package)
            except BaseException:
                self._discovered = False  # the next lookup raises it again
                raise
        load_plugins()

    def names(self):
        self.discover()
        return sorted(self._classes)

    def get(self, name: str, path: str = "") -> type:
        self.discover()
        if name not in self._classes:
            where = f" at '{path}.name'" if path else ""
            raise ConfigError(
                f"unknown {self.kind} '{name}'{where}. Registered {self.kind}s: "
                f"{', '.join(sorted(self._classes)) or '(none)'}.{suggest(name, self._classes)}"
            )
        return self._classes[name]

    def schema(self, name: str) -> type:
        self.get(name)
        return self._specs[name].schema

    def fields(self, name: str):
        """[(field, type string, default)] of a block's typed config; the fields of a nested
        config are listed as ``<field>.<subfield>``."""
        self.get(name)
        return _list_fields(self._specs[name])

    def field_names(self, name: str) -> set:
        """The top-level fields of block ``name``'s typed config (a nested config counts once)."""
        self.get(name)
        return {f.name for f in dataclasses.fields(self._specs[name].schema)}

    def child_default(self, name: str, field: str) -> Any:
        """The constructor default of block ``name``'s child-block field ``field`` (a fresh copy:
        ``{'name': 'multihead'}`` for transformer_encoder's ``attention``), or None."""
        if self.child_kind(name, field) is None:
            return None
        default = next(f for f in dataclasses.fields(self._specs[name].schema) if f.name == field)
        if default.default_factory is not dataclasses.MISSING:
            return default.default_factory()
        return None if default.default is dataclasses.MISSING else copy.deepcopy(default.default)

    def child_kind(self, name: str, field: str) -> Optional[str]:
        """The block kind a field of block ``name`` holds (``BlockSpec[kind]``: ``encoder`` for
        model 'seq2seq''s ``encoder``), or None for any other field."""
        self.get(name)
        child = self._specs[name].children.get(field)
        return child if isinstance(child, str) else None

    # -- validation and building ----------------------------------------------------------------
    def validate(self, cfg: Any, path: str = "") -> Dict[str, Any]:
        """``cfg`` checked against the block's typed config (child blocks and nested configs in
        turn), as a plain dict with every field (its default where ``cfg`` leaves it out)."""
        path = path or self.kind
        data = _to_dict(cfg)
        if "name" not in data or data["name"] in (None, ""):
            rest = ", ".join(k for k in data if k != "name")
            raise ConfigError(f"'{path}' needs a 'name': one of the registered {self.kind}s: "
                              f"{', '.join(self.names())}" + (f" (it holds only {rest})" if rest else ""))
        name = data.pop("name")
        if not isinstance(name, str):
            raise ConfigError(f"'{path}.name' must be a string naming a {self.kind}, got {name!r}")
        self.get(name, path)
        out = _check_fields(self._specs[name], data, path, f"{self.kind} '{name}'")
        out["name"] = name
        return out

    def ask(self, cfg: Any, hook: str, path: str = "") -> Any:
        """The answer of the class ``cfg`` names to its classmethod ``hook(fields)`` (None without
        one): how a block's config check learns what another block will give it."""
        data = _to_dict(cfg)
        answer = getattr(self.get(data.get("name"), path), hook, None)
        return answer(data if self._complete(data) else self.validate(data, path)) if answer else None

    def build(self, cfg: Any, *context: Any, path: str = "", **extra: Any):
        """Validate ``cfg`` and construct the block: ``Class(*context, **fields, **extra)``
        (a nested config is passed as its dataclass)."""
        data = _to_dict(cfg)
        if not (_BUILDING.get() and self._complete(data)):
            data = self.validate(data, path)
        return self.create(data, *context, **extra)

    def create(self, validated: Dict[str, Any], *context: Any, **extra: Any):
        """Construct the block of a config :meth:`validate` returned, without validating it again;
        the child blocks its constructor builds from that tree are not validated again either."""
        data = dict(validated)
        name = data.pop("name")
        for key, child in self._specs[name].children.items():
            if isinstance(child, _NestedConfig):
                data[key] = child.build(data[key])
        token = _BUILDING.set(True)
        try:
            return self._classes[name](*context, **data, **extra)
        finally:
            _BUILDING.reset(token)

    def _complete(self, data: Dict[str, Any]) -> bool:
        """Whether ``data`` holds every field of the block it names, as a validated config does."""
        name = data.get("name")
        return (isinstance(name, str) and name in self._specs
                and all(f.name in data for f in dataclasses.fields(self._specs[name].schema)))

    def __contains__(self, name: str) -> bool:
        self.discover()
        return name in self._classes

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {sorted(self._classes)})"

    @classmethod
    def kinds(cls) -> Dict[str, "Registry"]:
        """Every registry by kind (plugins may add kinds); each discovers its blocks on lookup."""
        load_plugins()
        return dict(cls._all)


def _import_all(name: str) -> None:
    """Import module ``name`` and, if it is a package, each of its public modules (sorted by name)."""
    module = importlib.import_module(name)
    for info in sorted(pkgutil.iter_modules(getattr(module, "__path__", [])), key=lambda m: m.name):
        if not info.name.startswith("_"):
            _import_all(f"{name}.{info.name}")


def _init_params(cls: Any, qualname: str) -> Dict[str, tuple]:
    """{field: (annotation, default)} of the keyword-only parameters of ``cls.__init__`` — and,
    while an ``__init__`` takes ``**kwargs`` (and passes them up), of the parents' ``__init__``
    along the MRO: parents' fields first; a subclass that declares a parent's field again changes
    its annotation or default in place."""
    if not isinstance(cls, type):  # a factory function
        inits = [cls]
    else:
        inits = []
        for klass in cls.__mro__:
            init = klass.__dict__.get("__init__")
            if init is None:
                continue
            inits.append(init)
            try:
                params = inspect.signature(init).parameters.values()
            except (TypeError, ValueError):  # a builtin without a signature
                break
            if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
                break
    out: Dict[str, tuple] = {}
    for init in reversed(inits):
        try:
            params = [p for p in inspect.signature(init).parameters.values()
                      if p.kind is inspect.Parameter.KEYWORD_ONLY]
        except (TypeError, ValueError):
            continue
        hints = typing.get_type_hints(init, include_extras=True) if params else {}
        for p in params:
            if p.name not in hints:
                raise TypeError(f"{qualname}: keyword-only parameter '{p.name}' needs a type annotation")
            if p.default is inspect.Parameter.empty:
                raise TypeError(f"{qualname}: keyword-only parameter '{p.name}' needs a default")
            out[p.name] = (hints[p.name], p.default)  # a redeclared field keeps its place
    return out


class _Spec(typing.NamedTuple):
    """A typed config: the generated dataclass and, per field, its child block kind or
    :class:`_NestedConfig`, its ``Literal`` choices and its :class:`Range`."""

    schema: type
    children: Dict[str, Any]
    choices: Dict[str, tuple]
    bounds: Dict[str, Range]


def _build_schema(params: Dict[str, tuple], qualname: str) -> _Spec:
    """The :class:`_Spec` of fields {name: (annotation, default)}."""
    fields, children, choices, bounds = [], {}, {}, {}
    for name, (tp, default) in params.items():
        tp, rng = split_range(tp)
        if rng is not None:
            if not rng.holds(default):
                raise TypeError(f"{qualname}: field '{name}' has a default {default!r} outside its "
                                f"range ({rng})")
            bounds[name] = rng
        kind = block_kind(tp)
        if kind is not None:
            children[name] = kind
            tp = Any
        elif isinstance(tp, type) and dataclasses.is_dataclass(tp):
            if not isinstance(default, tp):
                raise TypeError(f"{qualname}: field '{name}' needs a {tp.__name__} default")
            children[name] = _NestedConfig(tp, default, f"{qualname}.{name}")
            tp, default = Any, dataclasses.asdict(default)
        literal, optional = literal_choices(tp)
        if literal:
            choices[name] = literal + ((None,) if optional else ())
            tp = Optional[type(literal[0])] if optional else type(literal[0])
        if isinstance(default, (dict, list)):
            fields.append((name, tp, dataclasses.field(default_factory=lambda d=default: d)))
        else:
            fields.append((name, tp, dataclasses.field(default=default)))
    schema = dataclasses.make_dataclass(qualname.replace(".", "_") + "_config", fields)
    return _Spec(schema, children, choices, bounds)


class _NestedConfig:
    """A field annotated with a dataclass (e.g. a task's ``optim: OptimConfig``): its fields,
    with the defaults of the field's default instance, are validated like a block's — unknown
    field, type, ``Literal`` choices, ranges — and it is built as that dataclass."""

    def __init__(self, cls: type, default: Any, qualname: str):
        self.cls = cls
        hints = typing.get_type_hints(cls, include_extras=True)
        params = {f.name: (hints[f.name], getattr(default, f.name)) for f in dataclasses.fields(cls)}
        self.spec = _build_schema(params, qualname)

    def validate(self, cfg: Any, path: str, label: str) -> Dict[str, Any]:
        if cfg is None:
            cfg = {}
        if not (isinstance(cfg, (Mapping, DictConfig)) or dataclasses.is_dataclass(cfg)):
            names = ", ".join(f.name for f in dataclasses.fields(self.spec.schema))
            raise ConfigError(f"{label} (at '{path}') must be a mapping with the fields {names}; "
                              f"got {cfg!r}")
        return _check_fields(self.spec, _to_dict(cfg), path, label)

    def build(self, data: Dict[str, Any]) -> Any:
        data = dict(data)
        for key, child in self.spec.children.items():
            if isinstance(child, _NestedConfig):
                data[key] = child.build(data[key])
        return self.cls(**data)


def build_config(cls: type, cfg: Any, path: str, label: str) -> Any:
    """A dataclass config (e.g. ``data.word_vectors``) from a mapping, checked as a block's fields
    are (unknown field, type, ``Literal`` choices, :class:`Range`; a ConfigError naming
    ``path``); the dataclass's defaults fill what ``cfg`` leaves out."""
    nested = _NestedConfig(cls, cls(), path)
    return nested.build(nested.validate(cfg, path, label))


def _check_fields(spec: _Spec, data: Dict[str, Any], path: str, label: str) -> Dict[str, Any]:
    """``data`` checked against a typed config (unknown fields, types, choices, bounds, children) and
    completed with its defaults; errors name ``label`` (e.g. "scorer 'additive'") and the path."""
    schema, children, choices, bounds = spec
    allowed = [f.name for f in dataclasses.fields(schema)]
    for key in data:
        if key not in allowed:
            raise ConfigError(
                f"{label} has no field '{key}' (at '{path}.{key}'). "
                f"Its fields: {', '.join(allowed) or '(none)'}.{suggest(key, allowed)}"
            )
    plain = {k: v for k, v in data.items() if k not in children}
    try:
        typed = OmegaConf.merge(OmegaConf.structured(schema), plain)
    except OmegaConfBaseException as err:
        key = getattr(err, "key", None) or getattr(err, "full_key", None) or "?"
        ftype = {f.name: type_name(f.type) for f in dataclasses.fields(schema)}.get(str(key), "?")
        raise ConfigError(
            f"{label}: field '{key}' (at '{path}.{key}') must be {ftype}, got {plain.get(str(key))!r}"
        ) from None
    out = OmegaConf.to_container(typed)
    for key, options in choices.items():
        if out[key] not in options:
            raise ConfigError(
                f"{label}: field '{key}' (at '{path}.{key}') must be one of "
                f"{', '.join(map(choice_text, options))}, got {out[key]!r}.{suggest(str(out[key]), map(str, options))}"
            )
    for key, rng in bounds.items():
        if not rng.holds(out[key]):
            raise ConfigError(f"{label}: field '{key}' (at '{path}.{key}') {rng.refusal(out[key])}")
    for key, child in children.items():
        value = data.get(key, out.get(key))
        if isinstance(child, _NestedConfig):
            out[key] = child.validate(value, f"{path}.{key}", f"{label} {key} config")
        else:
            out[key] = None if value is None else Registry._all[child].validate(value, f"{path}.{key}")
    return out


def _list_fields(spec: _Spec):
    """[(field, type string, default)]; a nested config's fields as ``<field>.<subfield>``; a
    bounded field's type with its range (``float in [0, 1)``)."""
    schema, children, choices, bounds = spec
    out = []
    for f in dataclasses.fields(schema):
        child = children.get(f.name)
        if isinstance(child, _NestedConfig):
            out += [(f"{f.name}.{sub}", tname, default) for sub, tname, default in
                    _list_fields(child.spec)]
            continue
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        tname = f"BlockSpec[{child}]" if child else type_name(f.type)
        if f.name in choices:
            tname = one_of(choices[f.name])
        if f.name in bounds:
            tname = f"{tname} {bounds[f.name]}"
        out.append((f.name, tname, default))
    return out


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
    """Forget what was discovered and which plugins were loaded: the next lookup looks again and
    imports what is new (for tests that add a block module or install a plugin at run time)."""
    global _plugins_loaded
    _plugins_loaded = False
    for registry in Registry._all.values():
        registry._discovered = False


SCORERS = Registry("scorer", "attnflow.blocks.scorers")
NORMALIZERS = Registry("normalizer", "attnflow.blocks.normalizers")
AGGREGATORS = Registry("aggregator", "attnflow.blocks.aggregators")
ATTENTIONS = Registry("attention", "attnflow.blocks.attention")
ENCODERS = Registry("encoder", "attnflow.blocks.encoders")
DECODERS = Registry("decoder", "attnflow.blocks.decoders")
MODELS = Registry("model", "attnflow.models")
DATA = Registry("data", "attnflow.data")
TASKS = Registry("task", "attnflow.tasks")
LOGGERS = Registry("logger", "attnflow.training.loggers")
POOLINGS = Registry("pooling", "attnflow.blocks.pooling")
POSITIONALS = Registry("positional", "attnflow.blocks.positional")
GRAPH_LAYERS = Registry("graph_layer", "attnflow.blocks.graph")  # message-passing layers: (x (N, F), edge_index (2, E)) -> (N, D′)
