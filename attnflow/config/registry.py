"""Registries: the only way from a config name to a class.

One :class:`Registry` per block kind. A block registers under a short name
(``@SCORERS.register("additive")``); its keyword-only constructor parameters (annotated, with a
default) are its YAML fields, its positional ones the context a parent supplies. ``BlockSpec``
marks a child block, a dataclass annotation a nested config, ``Range`` bounds
(:mod:`attnflow.config.types`). :meth:`Registry.validate` refuses an unknown field, a wrong type,
choice or range with a :class:`ConfigError` naming the block, field and path. A registry imports
its package's modules on first lookup; plugins register through the ``attnflow.blocks``
entry-point group. A data module, model or task derives from its registry's base, what the run
asks of it (:mod:`attnflow.config.contracts`).
"""

from __future__ import annotations

import contextvars
import copy
import dataclasses
import difflib
import importlib
import inspect
import json
import pkgutil
import typing
from importlib import metadata
from typing import Any, Callable, Dict, Mapping, Optional, Sequence, Union

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from attnflow.io.console import AttnflowWarning  # noqa: F401  (re-exported)
from attnflow.config.contracts import DataContract, ModelContract, TaskContract
from attnflow.config.types import (  # noqa: F401  (the annotations blocks import from here)
    BlockSpec, NonNegativeFloat, NonNegativeInt, PositiveFloat, PositiveInt, Probability, Range,
    block_kind, choice_text, literal_choices, one_of, split_range, type_name)

ENTRY_POINT_GROUP = "attnflow.blocks"
CHECKS_KEPT = 512  # validated configs kept per registry (a sweep's jobs in one process)
_TRUSTED = contextvars.ContextVar("trusted", default=frozenset())  # ids of checked children


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

    def __init__(self, kind: str, packages: Union[str, Sequence[str]] = (), base: type = object):
        """``packages``: the module(s) or package(s) whose modules hold the built-in blocks;
        ``base``: the class every registered one derives from (what the run asks of them)."""
        if kind in Registry._all:
            raise ValueError(f"a registry for kind '{kind}' exists already")
        self.kind, self.base = kind, base
        self.packages = (packages,) if isinstance(packages, str) else tuple(packages)
        self._discovered = False
        self._classes: Dict[str, type] = {}
        self._specs: Dict[str, _Spec] = {}
        self._checked: Dict[str, Dict[str, Any]] = {}  # {config's fingerprint: its validation}
        Registry._all[kind] = self

    # -- registration -----------------------------------------------------------------------
    def register(self, name: str) -> Callable[[type], type]:
        def deco(cls: type) -> type:
            if name in self._classes:
                raise ValueError(f"{self.kind} '{name}' is registered already "
                                 f"({self._classes[name].__qualname__})")
            if self.base is not object and not (isinstance(cls, type) and issubclass(cls, self.base)):
                raise TypeError(f"{self.kind} '{name}': {cls.__qualname__} must derive from "
                                f"{self.base.__module__}.{self.base.__qualname__}")
            self._specs[name] = _build_schema(_init_params(cls, f"{self.kind}.{name}"), f"{self.kind}.{name}")
            self._classes[name] = cls
            _forget_checks()
            cls.registry_name = name
            return cls

        return deco

    def unregister(self, name: str) -> None:
        self._classes.pop(name, None)
        self._specs.pop(name, None)
        _forget_checks()

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
            raise ConfigError(f"unknown {self.kind} '{name}'{where}. Registered {self.kind}s: "
                              f"{', '.join(sorted(self._classes)) or '(none)'}."
                              f"{suggest(name, self._classes)}")
        return self._classes[name]

    def _spec(self, name: str) -> "_Spec":
        self.get(name)
        return self._specs[name]

    def schema(self, name: str) -> type:
        """Block ``name``'s typed config, a dataclass."""
        return self._spec(name).schema

    def fields(self, name: str):
        """[(field, type string, default)]; a nested config's as ``<field>.<subfield>``."""
        return list(_list_fields(self._spec(name)))

    def field_names(self, name: str) -> set:
        """The top-level fields of block ``name``'s typed config."""
        return {f.name for f in dataclasses.fields(self.schema(name))}

    def default(self, name: str, field: str) -> Any:
        """A fresh copy of the default of block ``name``'s field ``field``."""
        return copy.deepcopy(next(d for f, _, d in self.fields(name) if f == field))

    def child_default(self, name: str, field: str) -> Any:
        """:meth:`default` of block ``name``'s child-block field ``field``, or None."""
        return self.default(name, field) if self.child_kind(name, field) is not None else None

    def child_kind(self, name: str, field: str) -> Optional[str]:
        """The block kind of a ``BlockSpec[kind]`` field of block ``name``, else None."""
        child = self._spec(name).children.get(field)
        return child if isinstance(child, str) else None

    # -- validation and building ----------------------------------------------------------------
    def validate(self, cfg: Any, path: str = "") -> Dict[str, Any]:
        """``cfg`` checked against the block's typed config, as a plain dict with every field (a
        copy). Each config is checked once: the same fields again (a block built after the run
        checked its config, a scorer shared by several layers) are the first check's result."""
        data = _to_dict(cfg)
        key = _fingerprint(data)
        if key not in self._checked:
            if len(self._checked) >= CHECKS_KEPT:
                self._checked.clear()
            out = self._check(data, path or self.kind)
            self._checked[key] = self._checked[_fingerprint(out)] = out  # (it validates to itself)
        return copy.deepcopy(self._checked[key])

    def _check(self, data: Dict[str, Any], path: str) -> Dict[str, Any]:
        if "name" not in data or data["name"] in (None, ""):
            rest = ", ".join(k for k in data if k != "name")
            raise ConfigError(f"'{path}' needs a 'name': one of the registered {self.kind}s: "
                              f"{', '.join(self.names())}" + (f" (it holds only {rest})" if rest else ""))
        name = data.pop("name")
        if not isinstance(name, str):
            raise ConfigError(f"'{path}.name' must be a string naming a {self.kind}, got {name!r}")
        self.get(name, path)
        return {**_check_fields(self._specs[name], data, path, f"{self.kind} '{name}'"), "name": name}

    def build(self, cfg: Any, *context: Any, path: str = "", **extra: Any):
        """Validate ``cfg`` and construct ``Class(*context, **fields, **extra)``."""
        checked = isinstance(cfg, dict) and id(cfg) in _TRUSTED.get()
        return self.create(cfg if checked else self.validate(cfg, path), *context, **extra)

    def create(self, validated: Dict[str, Any], *context: Any, **extra: Any):
        """Construct the block of a validated config (its children are not validated again)."""
        data = dict(validated)
        name = data.pop("name")
        token = _TRUSTED.set(_TRUSTED.get() | _dict_ids(data))  # the children it builds
        try:
            return self._classes[name](*context, **_with_nested(self._specs[name], data), **extra)
        finally:
            _TRUSTED.reset(token)

    def __contains__(self, name: str) -> bool:
        self.discover()
        return name in self._classes

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {sorted(self._classes)})"

    @classmethod
    def kinds(cls) -> Dict[str, "Registry"]:
        """Every registry by kind (plugins may add kinds)."""
        load_plugins()
        return dict(cls._all)


def _fingerprint(data: Dict[str, Any]) -> str:
    return json.dumps(data, sort_keys=True, default=repr)


def _forget_checks() -> None:
    """Every registry's validations dropped (a block registered or removed changes them)."""
    for registry in Registry._all.values():
        registry._checked.clear()


def _dict_ids(node: Any) -> frozenset:
    """The ids of ``node``, a dict, and of the dicts inside it at any depth (in dicts and lists)."""
    inner = node.values() if isinstance(node, dict) else node if isinstance(node, list) else ()
    return frozenset([id(node)] if isinstance(node, dict) else []).union(*map(_dict_ids, inner))


def _import_all(name: str) -> None:
    """Import module ``name`` and, for a package, each of its public modules."""
    package = importlib.import_module(name).__spec__.submodule_search_locations  # (None: a module)
    for info in sorted(pkgutil.iter_modules(package or []), key=lambda m: m.name):
        if not info.name.startswith("_"):
            _import_all(f"{name}.{info.name}")


def _init_params(cls: Any, qualname: str) -> Dict[str, tuple]:
    """{field: (annotation, default)} of the keyword-only parameters of ``cls.__init__``, and of
    the parents' while an ``__init__`` passes ``**kwargs`` up (parents' fields first)."""
    klasses = cls.__mro__ if isinstance(cls, type) else ()
    inits = [k.__dict__["__init__"] for k in klasses if "__init__" in k.__dict__] or [cls]  # (a function)
    out: Dict[str, tuple] = {}
    for init in inits:
        try:
            params = inspect.signature(init).parameters.values()
        except (TypeError, ValueError):  # a builtin without a signature
            break
        own = [p for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY]
        hints = typing.get_type_hints(init, include_extras=True) if own else {}
        for p in own:
            if p.name not in hints or p.default is inspect.Parameter.empty:
                raise TypeError(f"{qualname}: keyword-only parameter '{p.name}' needs a type "
                                f"annotation and a default")
        out = {**{p.name: (hints[p.name], p.default) for p in own}, **out}  # parents' fields first
        if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
            break
    return out


class _Spec(typing.NamedTuple):
    """A typed config: its dataclass; per field its child kind or nested config's spec, choices,
    range; and, of a nested config, the dataclass it builds."""

    schema: type
    children: Dict[str, Any]
    choices: Dict[str, tuple]
    bounds: Dict[str, Range]
    cls: Any = None


def _build_schema(params: Dict[str, tuple], qualname: str) -> _Spec:
    fields, children, choices, bounds = [], {}, {}, {}
    for name, (tp, default) in params.items():
        tp, rng = split_range(tp)
        if rng is not None:
            bounds[name] = rng
        kind = block_kind(tp)
        if kind is not None:
            children[name] = kind
            tp = Any
        elif isinstance(tp, type) and dataclasses.is_dataclass(tp):
            if not isinstance(default, tp):
                raise TypeError(f"{qualname}: field '{name}' needs a {tp.__name__} default")
            children[name] = _nested_spec(tp, default, f"{qualname}.{name}")
            tp, default = Any, dataclasses.asdict(default)
        literal, optional = literal_choices(tp)
        if literal:
            choices[name] = literal + ((None,) if optional else ())
            tp = Optional[type(literal[0])] if optional else type(literal[0])
        mutable = isinstance(default, (dict, list))
        fields.append((name, tp, dataclasses.field(**{"default_factory": lambda d=default: d}
                                                   if mutable else {"default": default})))
    schema = dataclasses.make_dataclass(qualname.replace(".", "_") + "_config", fields)
    return _Spec(schema, children, choices, bounds)


def _nested_spec(cls: type, default: Any, qualname: str) -> _Spec:
    """A field annotated with a dataclass (``optim: OptimConfig``): validated like a block's
    fields (defaults from the field's default instance), built as that dataclass."""
    hints = typing.get_type_hints(cls, include_extras=True)
    params = {f.name: (hints[f.name], vars(default)[f.name]) for f in dataclasses.fields(cls)}
    return _build_schema(params, qualname)._replace(cls=cls)


def _check_nested(spec: _Spec, cfg: Any, path: str, label: str) -> Dict[str, Any]:
    if cfg is not None and not (isinstance(cfg, (Mapping, DictConfig)) or dataclasses.is_dataclass(cfg)):
        raise ConfigError(f"{label} (at '{path}') must be a mapping, got {cfg!r}")
    return _check_fields(spec, _to_dict(cfg or {}), path, label)


def _with_nested(spec: _Spec, data: Dict[str, Any]) -> Dict[str, Any]:
    """``data`` with each nested config's fields built as its dataclass."""
    nested = {k: child for k, child in spec.children.items() if isinstance(child, _Spec)}
    return {k: nested[k].cls(**_with_nested(nested[k], v)) if k in nested else v for k, v in data.items()}


def build_config(cls: type, cfg: Any, path: str, label: str) -> Any:
    """A dataclass config from a mapping, checked as a block's fields are."""
    spec = _nested_spec(cls, cls(), path)
    return cls(**_with_nested(spec, _check_nested(spec, cfg, path, label)))


def _check_fields(spec: _Spec, data: Dict[str, Any], path: str, label: str) -> Dict[str, Any]:
    """``data`` checked against a typed config and completed with its defaults; errors name
    ``label`` (e.g. "scorer 'additive'") and the path."""
    schema, children, choices, bounds, _ = spec
    allowed = [f.name for f in dataclasses.fields(schema)]
    for key in [k for k in data if k not in allowed]:
        raise ConfigError(f"{label} has no field '{key}' (at '{path}.{key}'). Its fields: "
                          f"{', '.join(allowed) or '(none)'}.{suggest(key, allowed)}")
    plain = {k: v for k, v in data.items() if k not in children}
    try:
        typed = OmegaConf.merge(OmegaConf.structured(schema), plain)
    except OmegaConfBaseException as err:
        key = err.key or err.full_key or "?"
        ftype = {f.name: type_name(f.type) for f in dataclasses.fields(schema)}.get(str(key), "?")
        raise ConfigError(f"{label}: field '{key}' (at '{path}.{key}') must be {ftype}, got "
                          f"{plain.get(str(key))!r}") from None
    out = OmegaConf.to_container(typed)
    for key in out:
        if key in choices and out[key] not in choices[key]:
            why = (f"must be one of {', '.join(map(choice_text, choices[key]))}, got {out[key]!r}."
                   f"{suggest(str(out[key]), map(str, choices[key]))}")
        elif key in bounds and not bounds[key].holds(out[key]):
            why = bounds[key].refusal(out[key])
        else:
            continue
        raise ConfigError(f"{label}: field '{key}' (at '{path}.{key}') {why}")
    for key, child in children.items():
        value = data.get(key, out.get(key))
        if isinstance(child, _Spec):
            out[key] = _check_nested(child, value, f"{path}.{key}", f"{label} {key} config")
        else:
            out[key] = None if value is None else Registry._all[child].validate(value, f"{path}.{key}")
    return out


def _list_fields(spec: _Spec, prefix: str = ""):
    """(field, type string with its choices or range, default) of each field."""
    for f in dataclasses.fields(spec.schema):
        child, bounds = spec.children.get(f.name), spec.bounds.get(f.name)
        if isinstance(child, _Spec):
            yield from _list_fields(child, f"{prefix}{f.name}.")
            continue
        tname = (one_of(spec.choices[f.name]) if f.name in spec.choices
                 else f"BlockSpec[{child}]" if child else type_name(f.type))
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        yield prefix + f.name, f"{tname} {bounds}" if bounds else tname, default


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
    """Forget what was discovered and loaded: the next lookup imports what is new."""
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
MODELS = Registry("model", "attnflow.models", ModelContract)
DATA = Registry("data", "attnflow.data", DataContract)
TASKS = Registry("task", "attnflow.tasks", TaskContract)
LOGGERS = Registry("logger", "attnflow.training.loggers")
POOLINGS = Registry("pooling", "attnflow.blocks.pooling")
POSITIONALS = Registry("positional", "attnflow.blocks.positional")
GRAPH_LAYERS = Registry("graph_layer", "attnflow.blocks.graph")  # (x, edge_index) -> (N, D′)
