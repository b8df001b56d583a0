"""The shared config groups and the composition contract: every group is used, or refused.

``scorer``, ``normalizer``, ``aggregator``, ``attention``, ``positional`` and ``pooling`` are
top-level choices a model consumes by interpolation (``attention: ${attention}``), so
``scorer=dot`` changes the scorer of whatever model is chosen. A group set on the command line
that the model does not consume is a :class:`ConfigError`; unconsumed groups are left out of the
run's config. A block swapped by name leaves out the old block's fields (one warning); a field
typed under a block left at its constructor default is set on that default.
"""

from __future__ import annotations

import functools
import re
import warnings
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, Optional

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf, open_dict

from attnflow import config_dir
from attnflow.config.contracts import Composable
from attnflow.config.overrides import typed_fields
from attnflow.config.registry import AttnflowWarning, Registry, ConfigError, suggest
from attnflow.config.secrets import leaves

SHARED_GROUPS = ("scorer", "normalizer", "aggregator", "attention", "positional", "pooling")
_REFERENCE = re.compile(r"\$\{\s*([A-Za-z_][\w]*)")


def _references(node: Any) -> List[str]:
    """Top-level keys named by the interpolations in an unresolved config tree."""
    return [key for _, value in leaves(node) if isinstance(value, str) for key in _REFERENCE.findall(value)]


def consumed_groups(cfg: DictConfig) -> List[str]:
    """The shared groups the model consumes: reachable from ``cfg.model`` by interpolation."""
    seen: List[str] = []
    todo = [OmegaConf.to_container(cfg.model, resolve=False)]
    while todo:
        for key in _references(todo.pop()):
            if key in SHARED_GROUPS and key not in seen and key in cfg:
                seen.append(key)
                todo.append(OmegaConf.to_container(cfg[key], resolve=False))
    return [g for g in SHARED_GROUPS if g in seen]


@functools.lru_cache(maxsize=4)
def _root(conf_dir: Path) -> DictConfig:
    """``conf/train.yaml``, read once (treat as read-only)."""
    return OmegaConf.load(Path(conf_dir) / "train.yaml")


def root_defaults(conf_dir: Path) -> Dict[str, str]:
    """{group: option} of the root config's defaults list (``conf/train.yaml``), less its
    overrides of Hydra's own groups."""
    return {str(group): option for entry in _root(conf_dir).get("defaults", [])
            if isinstance(entry, DictConfig) for group, option in entry.items()
            if not str(group).startswith("override ")}


def top_level_keys(conf_dir: Path) -> set:
    """The root config's keys: its defaults list's groups and its own fields (conf/train.yaml)."""
    fields = set(_root(conf_dir).keys()) - {"defaults"}
    return (set(root_defaults(conf_dir)) - {"experiment"}) | fields | {"hydra"}


def top_level_refusal(key: str, known: Iterable[str]) -> str:
    """What a run says of a top-level key its config lacks (``trainr.max_epochs=3``)."""
    return (f"the config has no top-level key '{key}'; keys: {', '.join(sorted(known))}."
            f"{suggest(key, known)}")


def _setting(cfg: DictConfig, group: str, option: Optional[str], default: Optional[str],
             conf_dir: Path) -> Optional[str]:
    """How this run sets ``group`` away from the root default, or None when it does not."""
    if option != default:
        return f"{group}={option}"
    current = OmegaConf.to_container(cfg[group], resolve=False) if cfg[group] is not None else None
    path = conf_dir / group / f"{option}.yaml"
    reference = OmegaConf.to_container(OmegaConf.load(path)) if option and path.is_file() else None
    if isinstance(reference, dict):
        reference.pop("defaults", None)
    if current == reference:
        return None
    if isinstance(current, dict) and isinstance(reference, dict):
        changed = sorted(k for k in {*current, *reference} if current.get(k) != reference.get(k))
        return ", ".join(f"{group}.{k}={current.get(k, '(removed)')}" for k in changed)
    return f"{group}={current}"


def _registry_at(cfg: DictConfig, path: str) -> Optional[Registry]:
    """The registry of the block at a dotted path (``model.encoder``: the model's
    ``BlockSpec["encoder"]`` field → the encoders), or None."""
    top, *rest = path.split(".")
    registry, node = Registry.kinds().get(top), cfg.get(top)
    for part in rest:
        name = node.get("name") if isinstance(node, DictConfig) else None
        if registry is None or not isinstance(name, str) or name not in registry:
            return None
        kind = registry.child_kind(name, part)
        registry, node = (Registry.kinds().get(kind) if kind else None), node.get(part)
    return registry


def drop_swapped_block_fields(cfg: DictConfig, overrides: Iterable[str]) -> None:
    """A block the command line swaps (``model.encoder.name=transformer_encoder``, a shared
    group's ``attention=single`` or ``attention.name=single``) leaves out the fields the config
    files set for the block it replaced and the new one lacks, with one warning naming them. A
    field typed on the command line stays, for the block's validation to refuse."""
    shown = typed_fields(map(str, overrides))
    for key, how in shown.items():
        path = key[:-len(".name")] if key.endswith(".name") else key
        if "." not in path and path not in SHARED_GROUPS:
            continue  # a top-level block (model.name) is swapped by its group (model=transformer)
        node = OmegaConf.select(cfg, path, throw_on_resolution_failure=False)
        registry = _registry_at(cfg, path) if isinstance(node, DictConfig) else None
        name = node.get("name") if registry is not None else None
        if not isinstance(name, str) or name not in registry:
            continue  # an unknown name: the block's validation names the registered ones
        fields = registry.field_names(name)
        stale = [k for k in node if k != "name" and k not in fields
                 and not any(t == f"{path}.{k}" or t.startswith(f"{path}.{k}.") for t in shown)]
        with open_dict(node):
            for k in stale:
                del node[k]
        if stale:
            warnings.warn(f"{registry.kind} '{name}' has no field "
                          f"{', '.join(f'{path}.{k}' for k in stale)}: set for the {registry.kind} "
                          f"that {how} replaced, left out", AttnflowWarning, stacklevel=2)


def fill_default_blocks(cfg: DictConfig, overrides: Iterable[str]) -> None:
    """Fields typed under a block the config files leave at its constructor default
    (``model.encoder.attention.heads=4``, transformer_encoder's ``{name: multihead}``) are set on
    that default, which the run's config then names. Only where the config composed without
    those overrides has no such key; elsewhere the block's validation judges what was typed."""
    overrides = list(map(str, overrides))
    shown = typed_fields(overrides)
    prefixes = sorted({key.rsplit(".", i)[0] for key in shown for i in range(1, key.count("."))},
                      key=lambda p: (p.count("."), p))  # the outer block first
    for path in prefixes:
        node = OmegaConf.select(cfg, path, throw_on_resolution_failure=False)
        parent_path, _, field = path.rpartition(".")
        parent = OmegaConf.select(cfg, parent_path, throw_on_resolution_failure=False)
        if (not isinstance(node, DictConfig) or "name" in node or not isinstance(parent, DictConfig)
                or OmegaConf.is_interpolation(parent, field)):
            continue
        registry, name = _registry_at(cfg, parent_path), parent.get("name")
        default = (registry.child_default(name, field)
                   if registry is not None and isinstance(name, str) and name in registry else None)
        if isinstance(default, dict) and "name" in default and not _in_files(path, overrides):
            with open_dict(parent):
                parent[field] = OmegaConf.merge(default, node)


def _in_files(path: str, overrides: List[str]) -> bool:
    """Whether the config composed without the overrides typed under ``path`` has that key (or
    cannot be composed)."""
    kept = tuple(o for o in overrides if not o.lstrip("+~").startswith(("hydra.", "hydra/"))
                 and not any(k == path or k.startswith(path + ".") for k in typed_fields([o])))
    base = _compose(kept, str(config_dir()))
    parent_path, _, field = path.rpartition(".")
    parent = base and OmegaConf.select(base, parent_path, throw_on_resolution_failure=False)
    return not isinstance(parent, DictConfig) or field in parent


@functools.lru_cache(maxsize=32)
def _compose(overrides: tuple, conf: str) -> Optional[DictConfig]:
    """Hydra's composition of ``train`` with ``overrides`` (in the running app's Hydra, else in
    the config tree ``conf``), or None where Hydra refuses them."""
    try:
        overrides = forced_fields(overrides)  # (as typed: a field at its default needs ++)
        if GlobalHydra.instance().is_initialized():
            return compose("train", overrides=overrides)
        with initialize_config_dir(config_dir=conf, version_base="1.3"):
            return compose("train", overrides=overrides)
    except (HydraException, ValueError):
        return None


def unused_groups(cfg: DictConfig, conf_dir: Path, choices: Optional[Mapping[str, Any]] = None,
                  typed: Optional[Iterable[str]] = None,
                  overrides: Optional[Iterable[str]] = None) -> tuple:
    """(the consumed groups, {group: its refusal} of those set but unused) of a composed,
    unresolved config. ``choices``: Hydra's group choices (else a group's option is its block's
    name); ``typed``: the top-level keys the command line set, where known (a group only an
    experiment set is then left out quietly); ``overrides``: the command line, to quote."""
    shown = typed_fields(map(str, overrides or ()))
    choices, defaults = dict(choices or {}), root_defaults(conf_dir)
    consumed = consumed_groups(cfg)
    model = cfg.model.get("name") if isinstance(cfg.model, DictConfig) else cfg.model
    unused: Dict[str, str] = {}
    for group in SHARED_GROUPS:
        if group not in cfg or group in consumed:
            continue
        node = cfg[group]
        option = choices.get(group) or (node.get("name") if isinstance(node, DictConfig) else None)
        how = _setting(cfg, group, option, defaults.get(group), conf_dir)
        if how and (typed is None or group in set(typed)):
            # as typed (scorer.name=general), not the setting it changed (an experiment's scorer=dot)
            how = " ".join(dict.fromkeys(v for k, v in shown.items() if k.split(".")[0] == group)) or how
            unused[group] = (
                f"{how} (at '{group}') does nothing: model '{model}' does not use the shared group "
                f"'{group}'. Of the shared groups ({', '.join(SHARED_GROUPS)}) it uses: "
                f"{', '.join(consumed) or 'none of them'}. Drop the override, choose a model that "
                f"uses '{group}', or set the model's own field (attnflow-blocks model shows them)")
    return consumed, unused


def prune_unused(resolved: Dict[str, Any], consumed: Iterable[str]) -> Dict[str, Any]:
    """The resolved config without the shared groups the model does not consume."""
    keep = set(consumed)
    return {k: v for k, v in resolved.items() if k not in SHARED_GROUPS or k in keep}


@functools.lru_cache(maxsize=1)
def schema_field_names() -> frozenset:
    """``name``, the name of every field of every registered block's typed config, and of every
    field of their entries (:attr:`~attnflow.config.contracts.Composable.entry_fields`)."""
    blocks = [(registry, name) for registry in Registry.kinds().values() for name in registry.names()]
    classes = [registry.get(name) for registry, name in blocks]
    entries = {field for cls in classes if isinstance(cls, type) and issubclass(cls, Composable)
               for field in cls.entry_fields}
    return frozenset({"name"} | entries | {field.rsplit(".", 1)[-1] for registry, name in blocks
                                           for field, _, _ in registry.fields(name)})


@functools.lru_cache(maxsize=4)
def config_keys(conf_dir: Path) -> frozenset:
    """Every key that some file of the config tree sets, at any depth."""
    keys, todo = set(), [OmegaConf.to_container(OmegaConf.load(p), resolve=False)
                         for p in conf_dir.rglob("*.yaml")]
    while todo:
        node = todo.pop()
        if isinstance(node, dict):
            keys.update(map(str, node))
            todo.extend(node.values())
    return frozenset(keys)


def _plain_key(item: str) -> Optional[str]:
    """The dotted key of a plain ``key=value`` (no ``+``, ``~``, flag, group or package), else None."""
    key = item.split("=", 1)[0]
    plain = ("=" in item and not item.startswith(("+", "~", "-", "hydra."))
             and "/" not in key and "@" not in key and "." in key)
    return key if plain else None


def _may_be_at_default(key: str) -> bool:
    """Whether a plain override's ``key`` may name a field the YAML leaves at its default: a
    block's field, a ``trainer.*`` or ``callbacks.*`` key."""
    return key.startswith(("trainer.", "callbacks.")) or key.rsplit(".", 1)[-1] in schema_field_names()


def forced_fields(overrides: Iterable[str]) -> List[str]:
    """What Hydra composes with for ``overrides``: ``key=value`` made ``++key=value`` where the
    key may name a field the YAML leaves at its default (:func:`_may_be_at_default`), which
    Hydra's config, closed to new keys, lacks; the rest as typed. It refuses nothing: see
    :func:`field_overrides`. ``attnflow-train`` gives Hydra the command line as typed and its
    config loader composes with this (:mod:`attnflow.config.hydra_internals`), so that Hydra
    records and prints the overrides as typed."""
    out = []
    for item in map(str, overrides):
        key = _plain_key(item)
        out.append("++" + item if key and _may_be_at_default(key) else item)
    return out


def check_field_overrides(overrides: Iterable[str], conf_dir: Path) -> None:
    """Refuse a plain ``key=value`` whose key no block has and no config file sets, naming the
    nearest field."""
    for key in filter(None, map(_plain_key, map(str, overrides))):
        leaf = key.rsplit(".", 1)[-1]
        if not _may_be_at_default(key) and leaf not in config_keys(conf_dir):
            raise ConfigError(f"no block has a field '{leaf}' (at '{key}'); `attnflow-blocks "
                              f"--config` lists a run's fields.{suggest(leaf, schema_field_names())}")


def field_overrides(overrides: Iterable[str], conf_dir: Path) -> List[str]:
    """:func:`forced_fields` of a command line that :func:`check_field_overrides` passes (what
    Hydra's compose API is given where no attnflow loader completes it)."""
    overrides = list(map(str, overrides))
    check_field_overrides(overrides, conf_dir)
    return forced_fields(overrides)
