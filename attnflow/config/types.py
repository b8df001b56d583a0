"""The annotations of a block's typed config (``BlockSpec[kind]``, ``Range``, ``Literal``) and
how a type reads in messages (:func:`type_name`)."""

from __future__ import annotations

import collections.abc
import dataclasses
import math
import types
import typing
from typing import Annotated, Any, Optional, Sequence, Union


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
    """Bounds of a numeric field: ``Annotated[float, Range(ge=0, lt=1)]``; ``what`` names the
    value in the message. ``None`` passes (an ``Optional`` field)."""

    ge: Optional[float] = None
    gt: Optional[float] = None
    le: Optional[float] = None
    lt: Optional[float] = None
    what: str = ""

    def holds(self, value: Any) -> bool:
        """Within the bounds, and finite (YAML reads ``nan`` and ``inf``)."""
        return value is None or not (
            (self.ge is not None and value < self.ge) or (self.gt is not None and value <= self.gt)
            or (self.le is not None and value > self.le) or (self.lt is not None and value >= self.lt)
            or value != value or value in (math.inf, -math.inf))

    def refusal(self, value: Any) -> str:
        finite = "a finite number " if value in (math.inf, -math.inf) else ""
        return f"must be {finite}{self}{f' ({self.what})' if self.what else ''}, got {value!r}"

    def __str__(self) -> str:
        low = [(op, v) for op, v in ((">=", self.ge), (">", self.gt)) if v is not None][:1]
        high = [(op, v) for op, v in (("<=", self.le), ("<", self.lt)) if v is not None][:1]
        if low and high:
            return f"in {'[(' [low[0][0] == '>']}{low[0][1]:g}, {high[0][1]:g}{'])' [high[0][0] == '<']}"
        return " ".join(f"{op} {v:g}" for op, v in low + high) or "any number"


Probability = Annotated[float, Range(ge=0, lt=1)]  # dropout rates, label smoothing
PositiveInt = Annotated[int, Range(ge=1)]
NonNegativeInt = Annotated[int, Range(ge=0)]
PositiveFloat = Annotated[float, Range(gt=0)]
NonNegativeFloat = Annotated[float, Range(ge=0)]


def split_range(tp: Any) -> tuple:
    """(the annotation without its :class:`Range`, the Range or None)."""
    rng = next((m for m in _metadata(tp) if isinstance(m, Range)), None)
    if rng is not None:
        return typing.get_args(tp)[0], rng
    if typing.get_origin(tp) is Union:
        parts = [split_range(a) for a in typing.get_args(tp)]
        found = [r for _, r in parts if r is not None]
        if found:
            return Union[tuple(t for t, _ in parts)], found[0]
    return tp, None


def _metadata(tp: Any) -> tuple:
    """What ``Annotated[T, ...]`` adds to ``T`` (() for another annotation)."""
    return typing.get_args(tp)[1:] if typing.get_origin(tp) is Annotated else ()


def block_kind(annotation: Any) -> Optional[str]:
    return next((meta.kind for meta in _metadata(annotation) if isinstance(meta, _BlockKind)), None)


def type_name(tp: Any) -> str:
    """A type in YAML's words: ``Optional[int]`` -> ``int or null``, ``list[int]`` -> ``list of
    int``, a ``Literal`` -> its choices, a class -> its name."""
    if isinstance(tp, str):
        return tp
    if tp is type(None):
        return "null"
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is Union or origin is types.UnionType:  # Literal members: one list of choices
        nullable = type(None) in args
        literal = [a for a in args if typing.get_origin(a) is typing.Literal]
        choices = [c for a in literal for c in typing.get_args(a)]
        names = [type_name(a) for a in args if a not in literal and a is not type(None)]
        if choices and not names:
            return one_of(choices + [None] * nullable)
        return " or ".join(dict.fromkeys(names + [one_of(choices)] * bool(choices) + ["null"] * nullable))
    if origin is typing.Literal:
        return one_of(args)
    if origin is Annotated:
        return type_name(args[0])
    if origin in (list, tuple, set, collections.abc.Iterable, collections.abc.Sequence) and args:
        return f"list of {type_name(args[0])}"
    return (origin or tp).__name__ if isinstance(origin or tp, type) else str(tp).replace("typing.", "")


def literal_choices(tp: Any) -> tuple:
    """(the values of a ``Literal`` or ``Optional[Literal]`` annotation, whether None is too)."""
    if typing.get_origin(tp) is typing.Literal:
        return typing.get_args(tp), False
    if typing.get_origin(tp) is Union:
        args = typing.get_args(tp)
        rest = [a for a in args if a is not type(None)]
        if len(rest) == 1 and len(args) == 2 and typing.get_origin(rest[0]) is typing.Literal:
            return typing.get_args(rest[0]), True
    return (), False


def choice_text(value: Any) -> str:
    return "null" if value is None else repr(value)


def one_of(values: Sequence[Any]) -> str:
    return " | ".join(map(choice_text, values))
