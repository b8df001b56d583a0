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
config of a child block of that kind and is validated recursively. A field annotated with a
dataclass (a task's ``optim: OptimConfig = OptimConfig(lr=0.003)``) is a nested typed config
without a name: its fields are checked like a block's (unknown field, type, ``Literal`` choices),
defaults come from the field's default instance, and the block receives the dataclass. A numeric
field's bounds are part of its annotation, ``Annotated[float, Range(ge=0, lt=1)]`` (or one of the
names for the common ones: :data:`Probability`, :data:`PositiveInt`, :data:`NonNegativeInt`,
:data:`PositiveFloat`, :data:`NonNegativeFloat`), and are checked with its type: a dropout of 1.5
or a learning rate of −1 is a ConfigError naming the field, before any work, not torch's
traceback from deep inside the build or the first step. A subclass whose ``__init__`` takes
``**kwargs`` (and passes them up) inherits its parents' keyword-only fields; declaring one again
changes its default.

``validate(cfg, path)`` checks a config tree before anything is built or loaded; errors are
:class:`ConfigError` naming the block kind, the block, the field and the config path, and listing
what is allowed.

Discovery: a registry knows the package(s) its built-in blocks live in (``SCORERS``:
``attnflow.blocks.scorers``) and imports every public module there on its first lookup, so a new
block is one new file, with no import list to edit. Third-party packages register blocks through
the ``attnflow.blocks`` entry-point group: each entry point names a module (imported for its
``register`` decorators) or a callable (called once).
"""

from __future__ import annotations

import collections.abc
import copy
import dataclasses
import difflib
import importlib
import inspect
import math
import pkgutil
import types
import typing
from importlib import metadata
from typing import Annotated, Any, Callable, Dict, Mapping, Optional, Sequence, Union

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from attnflow.io.console import AttnflowWarning  # noqa: F401  (re-exported)

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


@dataclasses.dataclass(frozen=True)
class Range:
    """Bounds of a numeric field, in its annotation: ``Annotated[float, Range(ge=0, lt=1)]``
    (``ge``/``gt``: at least / more than; ``le``/``lt``: at most / less than; ``what``: what the
    value is, for the message). ``None`` passes (the bounds of an ``Optional`` field)."""

    ge: Optional[float] = None
    gt: Optional[float] = None
    le: Optional[float] = None
    lt: Optional[float] = None
    what: str = ""

    def holds(self, value: Any) -> bool:
        """Within the bounds, and finite (NaN and ±inf, which YAML reads from ``nan``/``inf``, are
        no learning rate or weight: inf passed ``> 0`` and the run failed on a NaN loss)."""
        return value is None or not (
            (self.ge is not None and value < self.ge) or (self.gt is not None and value <= self.gt)
            or (self.le is not None and value > self.le) or (self.lt is not None and value >= self.lt)
            or value != value or value in (math.inf, -math.inf))

    def refusal(self, value: Any) -> str:
        """``must be <bounds> (<what>), got <value>`` for a value :meth:`holds` refuses."""
        finite = "a finite number " if value in (math.inf, -math.inf) else ""
        return f"must be {finite}{self}{f' ({self.what})' if self.what else ''}, got {value!r}"

    def __str__(self) -> str:
        low = (f"[{self.ge:g}" if self.ge is not None else f"({self.gt:g}" if self.gt is not None else None)
        high = (f"{self.le:g}]" if self.le is not None else f"{self.lt:g})" if self.lt is not None else None)
        if low and high:
            return f"in {low}, {high}"
        if low:
            return f"{'>=' if low[0] == '[' else '>'} {low[1:]}"
        return f"{'<=' if high[-1] == ']' else '<'} {high[:-1]}" if high else "any number"


Probability = Annotated[float, Range(ge=0, lt=1)]  # dropout rates, label smoothing
PositiveInt = Annotated[int, Range(ge=1)]
NonNegativeInt = Annotated[int, Range(ge=0)]
PositiveFloat = Annotated[float, Range(gt=0)]
NonNegativeFloat = Annotated[float, Range(ge=0)]


def _split_range(tp: Any) -> tuple:
    """(the annotation without its :class:`Range`, the Range or None); ``Optional[Annotated[T,
    Range]]`` gives ``Optional[T]``."""
    rng = next((m for m in getattr(tp, "__metadata__", ()) if isinstance(m, Range)), None)
    if rng is not None:
        return tp.__origin__, rng
    if typing.get_origin(tp) is Union:
        parts = [_split_range(a) for a in typing.get_args(tp)]
        found = [r for _, r in parts if r is not None]
        if found:
            return Union[tuple(t for t, _ in parts)], found[0]
    return tp, None


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
            self._specs[name] = _schema_from_init(cls, f"{self.kind}.{name}")
            self._classes[name] = cls
            cls.registry_name = name
            return cls

        return deco

    def unregister(self, name: str) -> None:
        """Forget block ``name`` (tests; a notebook cell that defines a block again)."""
        for table in (self._classes, self._specs):
            table.pop(name, None)

    # -- lookup ------------------------------------------------------------------------------
    def discover(self) -> None:
        """Import the modules of this registry's packages (once), then the plugins.

        An error in a built-in block module propagates: it is a bug, not a config error.
        """
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
        """Check ``cfg`` against the block's typed config; return it as a plain dict with defaults.

        Child blocks (fields annotated ``BlockSpec[kind]``) and nested configs (fields annotated
        with a dataclass) are validated recursively.
        """
        path = path or self.kind
        data = _to_dict(cfg)
        if "name" not in data or data["name"] in (None, ""):
            rest = {k: v for k, v in data.items() if k != "name"}
            hint = ""
            if rest:  # a field typed under a block that an interpolation named (model.attention:
                # ${attention}) replaces the interpolation: the block's own group is where it goes.
                # (Under a block left at its constructor default, attnflow-train sets the typed
                # fields on that default: attnflow.config.groups.fill_default_blocks; a config built in
                # Python without a command line must name the block with them.)
                first, value = next(iter(rest.items()))
                group = path.rsplit(".", 1)[-1]
                hint = (f" ('{path}' holds only {', '.join(rest)}: a field set under a block "
                        f"replaces that block's config. Where another config names the block "
                        f"(model.{group}: ${{{group}}}), set it there, e.g. {group}.{first}={value}; "
                        f"else name the block with it, e.g. {path}.name={self.names()[0]} "
                        f"{path}.{first}={value})")
            raise ConfigError(
                f"'{path}' needs a 'name': one of the registered {self.kind}s: "
                f"{', '.join(self.names())}{hint}"
            )
        name = data.pop("name")
        if not isinstance(name, str):
            raise ConfigError(f"'{path}.name' must be a string naming a {self.kind}, got {name!r}")
        self.get(name, path)
        out = _check_fields(self._specs[name], data, path, f"{self.kind} '{name}'")
        out["name"] = name
        return out

    def ask(self, cfg: Any, hook: str, path: str = "") -> Any:
        """What the class ``cfg`` names answers, from its fields with their defaults, through its
        classmethod ``hook`` (e.g. a data class's ``one_vocabulary(fields)``); None where the class
        has no such hook. How one block's config check learns what another block will give it,
        before any of them is built (:func:`attnflow.training.validate.check_composition`)."""
        answer = getattr(self.get(_to_dict(cfg).get("name"), path), hook, None)
        return answer(self.validate(cfg, path)) if answer is not None else None

    def inert_fields(self, validated: Dict[str, Any], path: str = "") -> Dict[str, str]:
        """{config path: why it does nothing} over a validated config tree (:meth:`validate`'s
        result): the fields that the rest of the config leaves unread, e.g. ``window`` of a
        global-alignment Luong decoder. A block class (or a nested config's dataclass) says which
        of its fields are idle with a classmethod ``inert_fields(fields) -> {field: why}``, given
        its fields with their defaults; the child blocks and nested configs are asked in turn.
        The run refuses a field listed here when the command line sets it
        (:mod:`attnflow.config.overrides`)."""
        path = path or self.kind
        return _inert(self._specs[validated["name"]], self._classes[validated["name"]],
                      validated, path)

    def build(self, cfg: Any, *context: Any, path: str = "", **extra: Any):
        """Validate ``cfg`` and construct the block: ``Class(*context, **fields, **extra)``
        (a nested config is passed as its dataclass)."""
        data = self.validate(cfg, path)
        name = data.pop("name")
        for key, child in self._specs[name].children.items():
            if isinstance(child, _NestedConfig):
                data[key] = child.build(data[key])
        return self._classes[name](*context, **data, **extra)

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


def type_name(tp: Any) -> str:
    """A type as a YAML user reads it, in messages and in ``attnflow-blocks``: ``Optional[int]``
    -> ``int or null``, ``Union[int, float]`` -> ``int or float``, ``list[int]`` -> ``list of
    int``, a ``Literal`` -> its choices (``'warn'``), a class -> its name (``Accelerator``)."""
    if isinstance(tp, str):
        return tp
    if tp is type(None):
        return "null"
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is Union or origin is types.UnionType:  # Literal members: one list of choices
        nullable = type(None) in args
        literal = [typing.get_origin(a) is typing.Literal for a in args]
        choices = [c for a, lit in zip(args, literal) if lit for c in typing.get_args(a)]
        names = [type_name(a) for a, lit in zip(args, literal) if not lit and a is not type(None)]
        if choices and not names:
            return _one_of(choices + [None] * nullable)
        names += [_one_of(choices)] if choices else []
        return " or ".join(dict.fromkeys(names + ["null"] * nullable))
    if origin is typing.Literal:
        return _one_of(args)
    if origin is Annotated:
        return type_name(args[0])
    if origin in (list, tuple, set, collections.abc.Iterable, collections.abc.Sequence) and args:
        return f"list of {type_name(args[0])}"
    return getattr(origin or tp, "__name__", None) or str(tp).replace("typing.", "")


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


def _schema_from_init(cls: type, qualname: str) -> "_Spec":
    """The typed config (:class:`_Spec`) of the keyword-only parameters of ``cls.__init__`` (and
    of its parents' when it passes ``**kwargs`` up: :func:`_init_params`)."""
    return _build_schema(_init_params(cls, qualname), qualname)


class _Spec(typing.NamedTuple):
    """A typed config: the generated dataclass (``schema``: each field's plain type and default)
    and what a type does not say. ``children``: field → block kind (``BlockSpec[kind]``) or
    :class:`_NestedConfig` (a field annotated with a dataclass: a typed child config without a
    name); ``choices``: field → the values of its ``Literal`` annotation; ``bounds``: field → its
    :class:`Range`."""

    schema: type
    children: Dict[str, Any]
    choices: Dict[str, tuple]
    bounds: Dict[str, Range]


def _literal(tp: Any) -> tuple:
    """(the values of a ``Literal`` annotation, whether ``None`` is allowed too): ``Literal['a',
    'b']`` → (('a', 'b'), False); ``Optional[Literal['a', 'b']]`` → (('a', 'b'), True); any other
    annotation → ((), False)."""
    if typing.get_origin(tp) is typing.Literal:
        return typing.get_args(tp), False
    if typing.get_origin(tp) is Union:
        args = typing.get_args(tp)
        rest = [a for a in args if a is not type(None)]
        if len(rest) == 1 and len(args) == 2 and typing.get_origin(rest[0]) is typing.Literal:
            return typing.get_args(rest[0]), True
    return (), False


def _choice(value: Any) -> str:
    """A choice as the user writes it in YAML (``null`` for None)."""
    return "null" if value is None else repr(value)


def _one_of(values: Sequence[Any]) -> str:
    """Choices as YAML values, ``'min' | 'max' | null``."""
    return " | ".join(map(_choice, values))


def _build_schema(params: Dict[str, tuple], qualname: str) -> _Spec:
    """The :class:`_Spec` of fields {name: (annotation, default)}."""
    fields, children, choices, bounds = [], {}, {}, {}
    for name, (tp, default) in params.items():
        tp, rng = _split_range(tp)
        if rng is not None:
            if not rng.holds(default):
                raise TypeError(f"{qualname}: field '{name}' has a default {default!r} outside its "
                                f"range ({rng})")
            bounds[name] = rng
        kind = _block_kind(tp)
        if kind is not None:
            children[name] = kind
            tp = Any
        elif isinstance(tp, type) and dataclasses.is_dataclass(tp):
            if not isinstance(default, tp):
                raise TypeError(f"{qualname}: field '{name}' needs a {tp.__name__} default")
            children[name] = _NestedConfig(tp, default, f"{qualname}.{name}")
            tp, default = Any, dataclasses.asdict(default)
        literal, optional = _literal(tp)
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
                f"{', '.join(map(_choice, options))}, got {out[key]!r}.{suggest(str(out[key]), map(str, options))}"
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


def _inert(spec: _Spec, cls: type, fields: Dict[str, Any], path: str) -> Dict[str, str]:
    own = getattr(cls, "inert_fields", None)
    out = {f"{path}.{k}": why.replace("{at}", f"{path}.")  # {at}: where the block is
           for k, why in (own(fields) if own is not None else {}).items()}
    for key, child in spec.children.items():
        value = fields.get(key)
        if isinstance(child, _NestedConfig):
            out.update(_inert(child.spec, child.cls, value or {}, f"{path}.{key}"))
        elif isinstance(value, dict) and value.get("name"):
            out.update(Registry._all[child].inert_fields(value, f"{path}.{key}"))
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
            tname = _one_of(choices[f.name])
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
