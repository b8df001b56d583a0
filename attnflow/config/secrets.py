"""Values from the environment kept out of what a run writes.

A value that reaches the config through ``${oc.env:VAR}`` (besides attnflow's own path variables,
conf/paths/) is used by the run, but its record (``config.yaml``, checkpoints, the loggers'
hyperparameters, reports) keeps the interpolation, which a resume or an evaluation resolves
again: :func:`find` names them in the config as composed, :func:`recorded` gives the resolved
config as written, :func:`resolve_env` resolves a recorded one. :func:`mask_url` hides the
password of a database URL (``postgresql://user:***@host/db``).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Tuple

from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from attnflow.config.registry import ConfigError

# attnflow's own path variables (conf/paths/default.yaml): a folder, not a secret
PATH_VARIABLES = ("ATTNFLOW_OUTPUT_DIR", "ATTNFLOW_DATA_DIR")
ENV = re.compile(r"\$\{oc\.env:\s*([^,}\s]+)")
# scheme://user:password@ (a password that is an interpolation is left as it is)
URL_PASSWORD = re.compile(r"(\b[a-zA-Z][\w+.-]*://[^:/@\s]*:)(?!\$\{)([^@\s/]+)(@)")
# a value this short is not searched for in other fields (it would match too much)
SHORTEST = 4


@dataclass
class Secrets:
    """``keys``: {dotted key: its interpolation text}; ``values``: {variable: its value}."""

    keys: Dict[str, str] = field(default_factory=dict)
    values: Dict[str, str] = field(default_factory=dict)


def env_variables(text: str) -> list:
    """The variables ``${oc.env:…}`` reads in ``text``, attnflow's path variables left out."""
    return [v for v in ENV.findall(text) if v not in PATH_VARIABLES]


def find(cfg: Any) -> Secrets:
    """The keys of ``cfg`` (a composed DictConfig or a plain dict) whose value comes from
    ``${oc.env:…}``, and the values of the variables read."""
    plain = OmegaConf.to_container(cfg, resolve=False) if isinstance(cfg, (DictConfig, ListConfig)) else cfg
    out = Secrets()
    for key, value in leaves(plain):
        names = env_variables(value) if isinstance(value, str) else []
        if names and not key.startswith("hydra."):
            out.keys[key] = value
            out.values.update({n: os.environ[n] for n in names if os.environ.get(n)})
    return out


def _hidden(value: Any, key: str, secrets: Secrets) -> Any:
    if key in secrets.keys:
        return secrets.keys[key]
    for name, secret in secrets.values.items() if isinstance(value, str) else ():
        if len(secret) >= SHORTEST:
            value = value.replace(secret, "${oc.env:" + name + "}")
    return mask_url(value)


def _mapped(node: Any, leaf: Callable[[Any, str], Any], prefix: str = "") -> Any:
    """A copy of a plain dict/list tree with each leaf as ``leaf(value, dotted key)``."""
    if isinstance(node, dict):
        return {k: _mapped(v, leaf, f"{prefix}.{k}" if prefix else str(k)) for k, v in node.items()}
    if isinstance(node, list):
        return [_mapped(v, leaf, f"{prefix}.{i}" if prefix else str(i)) for i, v in enumerate(node)]
    return leaf(node, prefix)


def leaves(node: Any) -> List[Tuple[str, Any]]:
    """(dotted key, value) of every leaf of a plain dict/list tree, in order."""
    out: List[Tuple[str, Any]] = []
    _mapped(node, lambda value, key: out.append((key, value)))
    return out


def recorded(resolved: Dict[str, Any], secrets: Secrets) -> Dict[str, Any]:
    """``resolved`` as a run writes it: each key of ``secrets`` as its interpolation, a
    variable's value elsewhere (a field built from it) as ``${oc.env:VAR}``, database URLs'
    passwords masked."""
    return _mapped(resolved, lambda value, key: _hidden(value, key, secrets))


def _resolved(value: Any, key: str) -> Any:
    if not (isinstance(value, str) and ENV.search(value)):
        return value
    try:
        return OmegaConf.to_container(OmegaConf.create({"v": value}), resolve=True)["v"]
    except OmegaConfBaseException as err:
        raise ConfigError(f"{key}: {value} as recorded, which cannot be resolved here "
                          f"({type(err).__name__}: {str(err).splitlines()[0]}); set the "
                          f"variable") from None


def resolve_env(cfg: Dict[str, Any]) -> Any:
    """A recorded config with its ``${oc.env:…}`` fields resolved again (a copy); an unset
    variable is a :class:`ConfigError` naming the field."""
    return _mapped(cfg, _resolved)


def mask_url(text: str) -> str:
    """``text`` with the password of any URL in it as ``***``."""
    return URL_PASSWORD.sub(r"\1***\3", text) if isinstance(text, str) else text

