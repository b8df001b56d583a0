"""The command line of a run as Hydra recorded it: which keys the user typed."""

from __future__ import annotations

import re
from typing import Any, Dict, Iterable, Iterator, List, Optional, Tuple

from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from omegaconf import DictConfig


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
    parser = OverridesParser.create()
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
            value = parser.parse_override(item).value()
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
    parser = OverridesParser.create()
    for arg in overrides:
        try:
            yield arg, parser.parse_override(arg)
        except HydraException:
            yield arg, None
