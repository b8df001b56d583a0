"""The shared config groups and the composition contract: every group is used, or refused.

``scorer``, ``normalizer``, ``aggregator``, ``attention``, ``positional`` and ``pooling`` are
top-level choices a model *consumes* by interpolating them (``attention: ${attention}`` in
``conf/model/transformer.yaml``, ``scorer: ${scorer}`` in ``conf/attention/multihead.yaml``), so
``scorer=dot`` changes the scorer of whatever model is chosen. A group this run sets that the
model does not consume is a :class:`ConfigError` (:func:`unused_groups`); unconsumed groups are
left out of the run's config. Swapping a block by name drops the old block's fields
(:func:`drop_swapped_block_fields`); a field typed under a block the files leave at its
constructor default is set on that default (:func:`fill_default_blocks`). The command line's
plain field assignments become Hydra's add-or-override where they may name such a field
(:func:`field_overrides`).
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
from attnflow.config.overrides import leaf_paths, typed_fields
from attnflow.config.registry import AttnflowWarning, Registry, ConfigError, suggest

SHARED_GROUPS = ("scorer", "normalizer", "aggregator", "attention", "positional", "pooling")
_REFERENCE = re.compile(r"\$\{\s*([A-Za-z_][\w]*)")


def _references(node: Any) -> Iterable[str]:
    """Top-level keys named by the interpolations in an unresolved config tree."""
    if isinstance(node, dict):
        for value in node.values():
            yield from _references(value)
    elif isinstance(node, list):
        for value in node:
            yield from _references(value)
    elif isinstance(node, str):
        yield from _REFERENCE.findall(node)


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


def root_defaults(conf_dir: Path) -> Dict[str, str]:
    """{group: option} of the root config's defaults list (``conf/train.yaml``)."""
    out: Dict[str, str] = {}
    for entry in OmegaConf.load(conf_dir / "train.yaml").get("defaults", []):
        if isinstance(entry, (dict, DictConfig)):
            for group, option in entry.items():
                out[str(group)] = option
    return out


def top_level_keys(conf_dir: Path) -> set:
    """The root config's keys: its defaults list's groups and its own fields (conf/train.yaml)."""
    fields = set(OmegaConf.load(conf_dir / "train.yaml").keys()) - {"defaults"}
    return (set(root_defaults(conf_dir)) - {"experiment"}) | fields | {"hydra"}


def top_level_refusal(key: str, known: Iterable[str]) -> str:
    """What a run says of a top-level key its config lacks (``trainr.max_epochs=3``)."""
    return (f"the config has no top-level key '{key}'; keys: {', '.join(sorted(known))}."
            f"{suggest(key, known)}")


def _option_file(conf_dir: Path, group: str, option: Optional[str]) -> Optional[dict]:
    path = conf_dir / group / f"{option}.yaml"
    if not option or not path.is_file():
        return None
    data = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    data.pop("defaults", None)
    return data


def _setting(cfg: DictConfig, group: str, option: Optional[str], default: Optional[str],
             conf_dir: Path) -> Optional[str]:
    """How this run sets ``group`` away from the root default, or None when it does not."""
    if option != default:
        return f"{group}={option}"
    current = OmegaConf.to_container(cfg[group], resolve=False) if cfg[group] is not None else None
    reference = _option_file(conf_dir, group, option)
    if current == reference:
        return None
    if isinstance(current, dict) and isinstance(reference, dict):
        changed = sorted(k for k in set(current) | set(reference) if current.get(k) != reference.get(k))
        return ", ".join(f"{group}.{k}={current.get(k, '(removed)')}" for k in changed)
    return f"{group}={current}"


def _typed_choices(keys: Mapping[str, str]) -> Dict[str, set]:
    """{shared group: the fields typed under it} for each shared group whose block the command
    line chose, by option or by name (``attention=single attention.dropout=0.1``, or
    ``attention.name=single``, → ``{'attention': {'dropout'}}``); ``keys``: the typed keys
    (:func:`attnflow.config.overrides.typed_fields`: a mapping value names its keys too)."""
    return {g: {k.split(".", 1)[1] for k in keys if k.startswith(g + ".")} - {"name"}
            for g in SHARED_GROUPS if g in keys or f"{g}.name" in keys}


def _drop_replaced_fields(cfg: DictConfig, group: str, option: Optional[str], conf_dir: Path,
                          typed: Optional[set] = None) -> None:
    """Drop the fields of the group's block that it lacks and that came from another block:
    ``group.name=X`` replaced the option's block (the old block's fields from its option file),
    or the command line chose the group's option (``typed``: the fields it typed under the
    group) over one an experiment configured — ``experiment=reverse_multihead attention=single``
    left the experiment's ``attention.heads`` for a block without heads, refused as unknown. A
    field typed on the command line stays, for the block's validation to refuse; a warning names
    what was left out."""
    node = cfg[group]
    reference = _option_file(conf_dir, group, option)
    if not isinstance(node, DictConfig) or reference is None:
        return
    name = node.get("name")
    registry = Registry.kinds().get(group)
    if registry is None or name not in registry or (name == reference.get("name") and typed is None):
        return
    fields = registry.field_names(name)
    current = OmegaConf.to_container(node, resolve=False)
    stale = [k for k, v in current.items()
             if k != "name" and k not in fields and k in reference and v == reference[k]]
    foreign = [k for k in current if typed is not None and k != "name" and k not in fields
               and k not in stale and k not in typed]
    with open_dict(node):
        for key in stale + foreign:
            del node[key]
    if foreign:
        warnings.warn(f"{group} '{name}' has no field {', '.join(f'{group}.{k}' for k in foreign)}: "
                      f"set for another {group}, left out", AttnflowWarning, stacklevel=2)


def _registry_at(cfg: DictConfig, path: str) -> Optional[Registry]:
    """The registry of the block at a dotted path nested in another block's config
    (``model.encoder``: the model's ``BlockSpec["encoder"]`` field → the encoders), or None."""
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
    """``model.encoder.name=transformer_encoder`` swaps a block nested in another's config, as
    ``scorer.name=`` swaps a shared group's: the fields the config files set there for the block
    it replaced and that the new block does not have (``cell``, ``hidden_dim`` of ``rnn``) are
    left out, with a warning naming them; without this the swap was refused for fields the user
    never typed, and a sweep over ``model.encoder.name`` was impossible. A field typed on the
    command line stays, for the block's validation to refuse. A top-level block (``model.name``)
    is swapped by its group (``model=transformer``), a shared group's by the contract above."""
    shown = typed_fields(map(str, overrides))
    for key in shown:
        path, _, last = key.rpartition(".")
        if last != "name" or "." not in path:
            continue
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
                          f"that {shown[key].lstrip('+')} replaced, left out", AttnflowWarning,
                          stacklevel=2)


def fill_default_blocks(cfg: DictConfig, overrides: Iterable[str]) -> None:
    """``model.encoder.attention.heads=4`` tunes a block that the config files leave at its
    constructor default (transformer_encoder's ``attention``: ``{name: multihead}``): the fields
    typed there are set on that default block, which is named in the run's config. Without this
    the typed fields replaced the default with a nameless block, refused. Only where the config
    without those overrides has no such key (composed again, once per block so filled). A block
    the files name through an interpolation (``model.word_pooling: ${pooling}``), which the typed
    fields replaced by a nameless block, is refused here, naming the interpolation, the other
    blocks that read it, the field on its group and this block given whole."""
    overrides = list(map(str, overrides))
    shown = typed_fields(overrides)
    prefixes = sorted({key.rsplit(".", i)[0] for key in shown for i in range(1, key.count("."))},
                      key=lambda p: (p.count("."), p))  # the outer block first
    for path in prefixes:
        node = OmegaConf.select(cfg, path, throw_on_resolution_failure=False)
        parent_path, _, field = path.rpartition(".")
        parent = OmegaConf.select(cfg, parent_path, throw_on_resolution_failure=False)
        if (not isinstance(node, DictConfig) or not isinstance(parent, DictConfig)
                or OmegaConf.is_interpolation(parent, field)):
            continue
        if "name" in node:  # a block swapped by name: over a shared group's, say what it left
            if f"{path}.name" in shown:
                _warn_group_replaced(cfg, path, _base_of(path, overrides), shown)
            continue
        registry = _registry_at(cfg, parent_path)
        name = parent.get("name")
        default = (registry.child_default(name, field)
                   if registry is not None and isinstance(name, str) and name in registry else None)
        if not isinstance(default, dict) or "name" not in default:
            continue
        base = _base_of(path, overrides)
        if _group_source(base, field) is not None:
            raise ConfigError(_interpolated_block(cfg, path, base, shown))
        if base is None or field in base[0]:
            continue  # the files put something there (or cannot tell): validation judges it
        with open_dict(parent):
            parent[field] = OmegaConf.merge(default, node)


def _warn_group_replaced(cfg: DictConfig, path: str, base: Optional[tuple],
                         shown: Mapping[str, str]) -> None:
    """``model.decoder.attention.name=multihead`` where the config files take that block from a
    shared group (``attention: ${attention}``, here ``single`` with an ``additive`` scorer): the
    override replaced the interpolation, so this block is the named one with its own defaults and
    the group's settings no longer reach it (nor do overrides of the group, refused then as unused
    where nothing else reads it). It takes effect; a warning says what it left and how to change
    the group instead."""
    found = _group_source(base, path.rpartition(".")[2])
    if found is None:
        return
    source, group = found
    held = OmegaConf.select(base[1], group, throw_on_resolution_failure=False)
    held = OmegaConf.to_container(held, resolve=True) if isinstance(held, DictConfig) else held
    name = OmegaConf.select(cfg, f"{path}.name")
    option = (f"{group}={name}" if (config_dir() / group / f"{name}.yaml").is_file()
              else f"{group}.name={name}")
    warnings.warn(f"{shown[path + '.name']} replaced the block this config takes from '{group}' "
                  f"({path}: {source}, here {_hydra_value(held)}): {path} is now {name} with its "
                  f"own defaults, and '{group}' no longer reaches it; to change '{group}' for every "
                  f"block that reads it, type {option} instead", AttnflowWarning, stacklevel=2)


def _base_of(path: str, overrides: List[str]) -> Optional[tuple]:
    """(the parent node of ``path``, the config) composed without the command line's fields under
    ``path``; None where it cannot be composed or has no such parent."""
    kept = tuple(o for o in overrides if not o.lstrip("+~").startswith(("hydra.", "hydra/"))
                 and not any(k == path or k.startswith(path + ".") for k in typed_fields([o])))
    base = _compose(kept, str(config_dir()))
    if base is None:
        return None
    parent = OmegaConf.select(base, path.rpartition(".")[0], throw_on_resolution_failure=False)
    return (parent, base) if isinstance(parent, DictConfig) else None


def _group_source(base: Optional[tuple], field: str) -> Optional[tuple]:
    """(the interpolation, the top-level key it reads) where the config :func:`_base_of` composed
    takes ``field`` of its parent node from another key (``attention: ${attention}``:
    ``('${attention}', 'attention')``), else None."""
    if base is None or field not in base[0] or not OmegaConf.is_interpolation(base[0], field):
        return None
    source = OmegaConf.to_container(base[0], resolve=False)[field]
    return source, _REFERENCE.findall(source)[0]


def _hydra_value(value: Any) -> str:
    """``value`` as an override's right-hand side (``{name:attention,scorer:{name:dot}}``)."""
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{_hydra_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(map(_hydra_value, value)) + "]"
    if isinstance(value, bool) or value is None:
        return {True: "true", False: "false", None: "null"}[value]
    if isinstance(value, str) and not re.fullmatch(r"[A-Za-z_][\w.\-]*", value):
        return repr(value)
    return str(value)


def _interpolated_block(cfg: DictConfig, path: str, base: tuple, shown: Mapping[str, str]) -> str:
    """Why fields typed under ``path`` are refused where the config files name the block there by
    an interpolation (``model.word_pooling: ${pooling}``): the override replaced the interpolation
    by a block holding only those fields. Names the group the block comes from, the other places
    that read it, and the two overrides that do what was meant: the field on the group (every
    block reading it changes), or this block given whole."""
    config = base[1]
    source, group = _group_source(base, path.rpartition(".")[2])
    typed = {k: v for k, v in shown.items() if k.startswith(path + ".")}
    first = next(iter(typed))
    top = path.split(".", 1)[0]  # (a shared group the model does not read names it too: not shown)
    readers = sorted(p for p, value in leaf_paths(OmegaConf.to_container(config[top], resolve=False),
                                                  top) if value == source and p != path)
    block = OmegaConf.to_container(OmegaConf.select(config, path), resolve=True)
    for key in sorted(typed, key=lambda k: (not k.endswith(".name"), k.count("."))):
        *inner, last = key[len(path) + 1:].split(".")
        node = block
        for part in inner:
            if not isinstance(node.get(part), dict):
                node[part] = {}
            node = node[part]
        value = OmegaConf.to_container(OmegaConf.create({"v": OmegaConf.select(cfg, key)}))["v"]
        if last == "name" and node.get("name") != value:
            node.clear()  # another block: the old one's fields are not its own
        node[last] = value
    also = f"; {', '.join(readers)} read{'s' if len(readers) == 1 else ''} it too" if readers else ""
    return (f"{typed[first]} (at '{path}') replaces the block there, which this config takes from "
            f"'{group}' ({path}: {source}{also}), by one holding only what was typed, without a "
            f"name. Set the field where the block is chosen, for every block that reads it: e.g. "
            f"{group}{typed[first].split('=', 1)[0][len(path):]}={typed[first].split('=', 1)[1]}; "
            f"or give this block whole: {path}={_hydra_value(block)}")


@functools.lru_cache(maxsize=32)
def _compose(overrides: tuple, conf: str) -> Optional[DictConfig]:
    """Hydra's composition of ``train`` with ``overrides`` (in the running app's Hydra, else in
    the config tree ``conf``), or None where Hydra refuses them."""
    try:
        if GlobalHydra.instance().is_initialized():
            return compose("train", overrides=list(overrides))
        with initialize_config_dir(config_dir=conf, version_base="1.3"):
            return compose("train", overrides=list(overrides))
    except (HydraException, ValueError):
        return None


def check_shared_groups(cfg: DictConfig, conf_dir: Path,
                        choices: Optional[Mapping[str, Any]] = None,
                        typed: Optional[Iterable[str]] = None) -> List[str]:
    """Enforce the contract (see :func:`unused_groups`); return the consumed groups."""
    consumed, unused = unused_groups(cfg, conf_dir, choices, typed)
    if unused:
        raise ConfigError(next(iter(unused.values())))
    return consumed


def unused_groups(cfg: DictConfig, conf_dir: Path, choices: Optional[Mapping[str, Any]] = None,
                  typed: Optional[Iterable[str]] = None,
                  overrides: Optional[Iterable[str]] = None) -> tuple:
    """(the consumed groups, {group: its refusal} of those set but unused) of a composed,
    unresolved config; a replaced block's stale fields are dropped from ``cfg`` on the way.
    ``choices``: Hydra's group choices (else a group's option is its block's name); ``typed``: the
    top-level keys the command line set, where known: a group an experiment file set is then left
    out quietly when an override changes the model's need of it (``experiment=han_imdb
    pooling=max``); ``overrides``: the command line."""
    shown = typed_fields(map(str, overrides or ()))  # {typed key: the override as typed}
    chosen = _typed_choices(shown)
    choices = dict(choices or {})
    defaults = root_defaults(conf_dir)
    consumed = consumed_groups(cfg)
    model = cfg.model.get("name") if isinstance(cfg.model, DictConfig) else cfg.model
    unused: Dict[str, str] = {}
    for group in SHARED_GROUPS:
        if group not in cfg:
            continue
        node = cfg[group]
        option = choices.get(group) or (node.get("name") if isinstance(node, DictConfig) else None)
        if group in consumed:
            _drop_replaced_fields(cfg, group, option, conf_dir, chosen.get(group))
            continue
        how = _setting(cfg, group, option, defaults.get(group), conf_dir)
        if how and (typed is None or group in set(typed)):
            # as typed (scorer.name=general), not the setting it changed (an experiment's scorer=dot)
            how = " ".join(dict.fromkeys(v for k, v in shown.items() if k.split(".")[0] == group)) or how
            uses = ", ".join(consumed) or "none of them"
            unused[group] = (
                f"{how} (at '{group}') does nothing: model '{model}' does not use the shared group "
                f"'{group}'. Of the shared groups ({', '.join(SHARED_GROUPS)}) it uses: {uses}. Drop "
                f"the override, choose a model that uses '{group}', or set the model's own field "
                f"(attnflow-blocks model shows them)")
    return consumed, unused


def prune_unused(resolved: Dict[str, Any], consumed: Iterable[str]) -> Dict[str, Any]:
    """The resolved config without the shared groups the model does not consume."""
    keep = set(consumed)
    return {k: v for k, v in resolved.items() if k not in SHARED_GROUPS or k in keep}


@functools.lru_cache(maxsize=1)
def schema_field_names() -> frozenset:
    """The name of every field of every registered block's typed config (a nested config's
    fields too) and ``name``: the keys a preset may leave at their constructor default."""
    return frozenset({"name"} | {field.rsplit(".", 1)[-1] for registry in Registry.kinds().values()
                                 for name in registry.names() for field, _, _ in registry.fields(name)})


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


def field_overrides(overrides: Iterable[str], conf_dir: Path) -> List[str]:
    """The command line with ``key=value`` made ``++key=value`` where the key may name a field
    the YAML leaves at its default: a field of some block's typed config (``attention.heads=4``),
    or a Trainer argument or callback field (``trainer.*``, ``callbacks.*``: Lightning's
    signature and the callbacks' typed configs check those). Every other key keeps Hydra's own
    strict check; one that no block has and no config file sets is refused here, with the
    nearest field name (before Hydra, whose message has none)."""
    known = schema_field_names()
    out = []
    for item in overrides:
        key = item.split("=", 1)[0]
        plain = ("=" in item and not item.startswith(("+", "~", "-", "hydra."))
                 and "/" not in key and "@" not in key and "." in key)
        leaf = key.rsplit(".", 1)[-1]
        if plain and (key.startswith(("trainer.", "callbacks.")) or leaf in known):
            item = "++" + item
        elif plain and leaf not in config_keys(conf_dir):
            raise ConfigError(f"no block has a field '{leaf}' (at '{key}'); `attnflow-blocks "
                              f"--config` lists a run's fields.{suggest(leaf, known)}")
        out.append(item)
    return out
