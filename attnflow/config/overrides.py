"""Overrides, read by Hydra's own grammar in this one module: the command line of a run as
Hydra recorded it, which keys the user typed, and the words the shell split."""

from __future__ import annotations

import functools
import re
from typing import Any, Dict, Iterable, Iterator, List, Optional, Tuple

from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from hydra.errors import HydraException
from omegaconf import DictConfig

from attnflow.io.console import shell_word


@functools.lru_cache(maxsize=1)
def _parser() -> OverridesParser:
    return OverridesParser.create()


def parse(line: str) -> Override:
    """Hydra's parse of one override; a ``HydraException`` where Hydra refuses it."""
    return _parser().parse_overrides([line])[0]


def assignments(overrides: Iterable[str]) -> Dict[str, str]:
    """{key: value as Hydra reads it} of the ``key=value`` overrides Hydra can parse: the key
    without ``+``/``++`` or ``@package``, a value unquoted (a deletion's: "")."""
    out = {}
    for _, override in parsed(o for o in overrides if "=" in o and not o.startswith("-")):
        if override is not None:
            value = None if override.is_delete() else override.value()
            out[override.key_or_group] = "" if value is None else str(value)
    return out


def command_line(cfg: Any) -> Optional[List[str]]:
    """Hydra's task overrides of this run, or None where no command line is known."""
    if isinstance(cfg, DictConfig) and "hydra" in cfg and cfg.hydra.get("overrides") is not None:
        return [str(o) for o in cfg.hydra.overrides.task]
    if HydraConfig.initialized():
        return [str(o) for o in HydraConfig.get().overrides.task]
    return None


def typed_fields(overrides: Iterable[str]) -> Dict[str, str]:
    """{dotted key: the override as typed} of the assignments, a mapping value's keys too
    (``callbacks.average={last:2}`` → ``callbacks.average.last``); not deletions, nor ``a/b=c``."""
    out = {}
    for item in overrides:
        if item.startswith("~") or "=" not in item:
            continue
        key = item.split("=", 1)[0].lstrip("+")
        if "/" in key or "@" in key:
            continue
        shown = item.lstrip("+")
        out[key] = shown
        try:
            value = parse(item).value()
        except HydraException:
            continue
        todo = [(key, value)]
        while todo:
            prefix, node = todo.pop()
            if isinstance(node, dict):
                for k, v in node.items():
                    out.setdefault(f"{prefix}.{k}", shown)
                    todo.append((f"{prefix}.{k}", v))
    return out


def typed_groups(overrides: Optional[Iterable[str]]) -> Optional[set]:
    """The top-level keys the command line set, or None where no command line is known."""
    if overrides is None:
        return None
    return {re.split(r"[./=@]", str(o).lstrip("+~"), maxsplit=1)[0] for o in overrides}


def parsed(overrides: Iterable[str]) -> Iterator[Tuple[str, Any]]:
    """(override as typed, Hydra's parse of it, or None where Hydra cannot parse it: its own
    message about the syntax follows when it runs)."""
    for arg in overrides:
        try:
            yield arg, parse(arg)
        except HydraException:
            yield arg, None


def split_value(argv: List[str]) -> Optional[str]:
    """One line refusing a word the shell split off an override's value (``hydra.run.dir=runs/my
    runs/été 1`` typed without quotes: ``runs/été`` and ``1`` are no overrides), with the quoted
    form; else None. A word after a flag is the flag's (``-cd DIR``)."""
    for n, word in enumerate(argv[1:], 1):
        before = argv[n - 1]
        if "=" in word or word.startswith("-") or "=" not in before or before.startswith("-"):
            continue
        rest = [word]
        for more in argv[n + 1:]:
            if "=" in more or more.startswith("-"):
                break
            rest.append(more)
        key, _, value = before.partition("=")
        return (f"{word!r} is not an override (key=value): the shell split the value of "
                f"{key}; a value with spaces is quoted: {shell_word(key, ' '.join([value, *rest]))}")
    return None
