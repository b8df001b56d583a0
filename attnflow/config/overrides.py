"""Overrides that would do nothing are refused, before any work.

A field can be valid and still unread: ``data.batch_size=64`` with ``data.loader=full`` (the whole
graph is one batch), ``task.optim.warmup_steps=300`` with ``task.optim.scheduler=none`` (no
warm-up), ``model.decoder.window=3`` with global alignment (no window). Accepting such an override
lets a user believe a run or a sweep tried something it never did. Each block says which of its
fields the rest of its config leaves idle, with a classmethod ``inert_fields(fields) -> {field:
why}`` (``{at}`` in a reason stands for the block's config path), collected over the config tree
by :meth:`attnflow.config.registry.Registry.inert_fields`; the Trainer's are listed here. A field is
refused only where the command line sets it — a preset may keep a value for a variant that reads
it — and the error names the override, why it is idle and what would make it count. A sweep is
weighed over its jobs (:func:`attnflow.config.sweeps.check_sweep_values`): a field is refused there only
when no job reads it, so a conditional space (``-m model.encoder.layers=1,2
model.encoder.dropout=0.3``) runs.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from typing import Any, Dict, Iterable, Iterator, List, Mapping, Optional, Tuple

from omegaconf import DictConfig, OmegaConf

from attnflow.config.registry import ConfigError, DATA, MODELS, TASKS

_GROUPS = (("data", DATA), ("model", MODELS), ("task", TASKS))


def command_line(cfg: Any) -> Optional[List[str]]:
    """Hydra's task overrides of this run (``['data.batch_size=8', 'scorer=dot']``), or None where
    no command line is known (a config composed in Python without Hydra's node)."""
    from hydra.core.hydra_config import HydraConfig

    if isinstance(cfg, DictConfig) and "hydra" in cfg and cfg.hydra.get("overrides") is not None:
        return [str(o) for o in cfg.hydra.overrides.task]
    if HydraConfig.initialized():
        return [str(o) for o in HydraConfig.get().overrides.task]
    return None


def typed_fields(overrides: Iterable[str]) -> Dict[str, str]:
    """{dotted key: the override as typed} of the assignments (``++data.batch_size=8`` →
    ``data.batch_size``; a mapping value names each of its keys, ``callbacks.average={last:2,
    mode:max}`` → ``callbacks.average.last``, ``callbacks.average.mode``); deletions (``~key``)
    and group choices with a package (``a/b=c``) are left out."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

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


def _trainer_inert(trainer: Mapping[str, Any], test: Any = True,
                   callbacks: Optional[Mapping[str, Any]] = None,
                   logger: Any = None) -> Dict[str, str]:
    out = {}
    every = _log_interval_inert(logger, (callbacks or {}).get("progress_bar", "auto"))
    if every:
        out["trainer.log_every_n_steps"] = every
    if (callbacks or {}).get("early_stopping") is None and trainer.get("max_time") is None:
        # Lightning keeps a minimum only against a request to stop early (EarlyStopping, the
        # Timer of max_time); without one the run trains to max_epochs / max_steps regardless
        for key in ("min_epochs", "min_steps"):
            out[f"trainer.{key}"] = (
                "nothing asks the run to stop before trainer.max_epochs / trainer.max_steps "
                f"(callbacks.early_stopping is null, trainer.max_time unset), and {key} only holds "
                "off such a stop; set callbacks.early_stopping (e.g. callbacks.early_stopping={}) "
                "or trainer.max_time")
    if not trainer.get("gradient_clip_val"):
        out["trainer.gradient_clip_algorithm"] = (
            "trainer.gradient_clip_val is unset (or 0), so gradients are not clipped; set "
            "trainer.gradient_clip_val to clip them")
    if test is False:  # (attnflow-eval takes its own limit_test_batches)
        out["trainer.limit_test_batches"] = "test=false, so the run tests nothing; set test=true"
    out.update(_fast_dev_run_inert(trainer))
    return out


def _fast_dev_run_inert(trainer: Mapping[str, Any]) -> Dict[str, str]:
    """With ``trainer.fast_dev_run=N`` Lightning runs N batches of training (one epoch),
    validation and test, and sets these limits itself (``_init_debugging_flags``; training's and
    validation's only without ``overfit_batches``): a value typed for one of them is idle, unless
    it is the one fast_dev_run sets (``num_sanity_val_steps=0``)."""
    runs = trainer.get("fast_dev_run")
    if not runs:
        return {}
    n = int(runs)
    sets = {"max_epochs": 1, "max_steps": n, "limit_test_batches": n, "limit_predict_batches": n,
            "num_sanity_val_steps": 0, "val_check_interval": 1.0, "check_val_every_n_epoch": 1,
            **({} if trainer.get("overfit_batches") else {"limit_train_batches": n,
                                                          "limit_val_batches": n})}
    return {f"trainer.{key}": (f"trainer.fast_dev_run={str(runs).lower()} sets it to {value} itself "
                               f"(Lightning's debugging run: {n} batch{'es' if n > 1 else ''} of "
                               f"training in one epoch, then of validation and test, no sanity "
                               f"check); drop trainer.fast_dev_run for it to count")
            for key, value in sets.items() if trainer.get(key) != value}


def _log_interval_inert(logger: Any, bar: Any) -> Optional[str]:
    """Why ``trainer.log_every_n_steps`` is idle, or None where it is read. Lightning reads it only
    to send step metrics to the loggers (and the LR monitor, which needs one), so with
    ``logger=none`` its one reader is the text progress bar (:class:`attnflow.training.progress.TextProgressBar`:
    a line every ``log_every_n_steps`` batches), which ``auto`` is where the output is not a
    terminal."""
    if logger is None:  # (a config without a logger entry: nothing is claimed)
        return None
    if ({logger} if isinstance(logger, str) else set(logger)) - {"none"}:
        return None
    from attnflow.io.console import is_interactive

    if bar == "text" or (bar == "auto" and not is_interactive()):
        return None
    drawn = {"auto": "callbacks.progress_bar=auto draws the rich bar on this terminal, which does "
                     "not print by steps",
             "none": "callbacks.progress_bar=none draws no bar",
             None: "callbacks.progress_bar=null draws no bar"}.get(
        bar, f"callbacks.progress_bar={bar} is a redrawn bar, which does not print by steps")
    return (f"logger=none logs no metrics, and {drawn}; only a logger and the text bar (a line "
            f"every log_every_n_steps batches) read it: choose one (e.g. logger=csv, or "
            f"callbacks.progress_bar=text)")


def _validation_off_inert(resolved: Mapping[str, Any]) -> Dict[str, str]:
    """A task's fields read only at the end of a validation epoch (``validation_epoch_fields``: the
    classification task's HTML renderings) are idle under ``trainer.limit_val_batches=0``:
    Lightning then skips the validation loop and its hooks, the final validation's too
    (``fast_dev_run`` sets its own limit)."""
    from attnflow.training.trainer_checks import reads_no_batch  # (run imports this module)

    trainer, task = resolved.get("trainer") or {}, (resolved.get("task") or {}).get("name")
    limit = trainer.get("limit_val_batches")
    if not task or trainer.get("fast_dev_run") or not reads_no_batch(limit):
        return {}
    return {f"task.{field}": (f"trainer.limit_val_batches={limit} runs no validation, and task "
                              f"'{task}' reads it at the end of a validation epoch only; validate "
                              f"(e.g. trainer.limit_val_batches=1.0) for it to count")
            for field in getattr(TASKS.get(task), "validation_epoch_fields", ())}


@functools.lru_cache(maxsize=1)
def _data_dir_presets() -> Dict[str, Tuple[str, Tuple[str, ...]]]:
    """{data preset (``conf/data/<preset>.yaml``): (its data module's name, its fields built from
    ``${paths.data_dir}``, as ``data.<dotted key>``)}: the presets that read files under it."""
    from attnflow import config_dir

    out = {}
    for path in sorted((config_dir() / "data").glob("*.yaml")):
        preset = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
        fields = [at for at, value in leaf_paths(preset, "data")  # (in the preset's order)
                  if isinstance(value, str) and "paths.data_dir" in _REFERENCE.findall(value)]
        if fields:
            out[path.stem] = (str(preset.get("name")), tuple(fields))
    return out


def _data_dir_inert(data: Any) -> Dict[str, str]:
    """``paths.data_dir`` is read only through interpolations (``root: ${paths.data_dir}/planetoid``
    in ``conf/data/``; attnflow's code never reads it), so it is claimed idle here and
    :func:`unread_overrides` lets it through wherever one reads it. ``$ATTNFLOW_DATA_DIR`` sets
    its default, not a typed override: never refused."""
    name = data.get("name") if isinstance(data, Mapping) else None
    if not name:
        return {}
    presets = _data_dir_presets()
    if getattr(DATA.get(name), "generates_data", False):
        readers = "data=" + ", ".join(presets)
        return {"paths.data_dir": (f"data '{name}' generates its data and reads no files, and no field "
                                   f"of this config is built from paths.data_dir; the data presets "
                                   f"that read files find them under it ({readers}): choose one "
                                   f"of those")}
    fields = [f for module, found in presets.values() if module == name for f in found]
    example = f"{fields[0]}='${{paths.data_dir}}/…'" if fields else "'${paths.data_dir}/…'"
    return {"paths.data_dir": (f"data '{name}' reads the files its own fields name, and none of them "
                               f"is built from paths.data_dir here; build a path from it (e.g. "
                               f"{example}, as conf/data/ does)")}


@functools.lru_cache(maxsize=1)
def _paths_preset() -> Dict[str, Any]:
    """conf/paths/default.yaml, unresolved (``data_dir: ${oc.env:ATTNFLOW_DATA_DIR,
    ${paths.root_dir}/../shared/data}``)."""
    from attnflow import config_dir

    return OmegaConf.to_container(OmegaConf.load(config_dir() / "paths" / "default.yaml"))


def _root_dir_inert(paths: Mapping[str, Any], data_dir_why: Optional[str]) -> Dict[str, str]:
    """``paths.root_dir`` (the checkout) is read by nothing but ``paths.data_dir``'s default in
    conf/paths/ (no conf/ file, no attnflow code reads it; Hydra's folders come from
    ``paths.output_root``), so it is claimed idle where that default is not used (a typed
    ``paths.data_dir``, ``$ATTNFLOW_DATA_DIR``) or paths.data_dir is idle itself
    (``data_dir_why``); :func:`read_keys` lets it through where paths.data_dir reads it and is read."""
    if "root_dir" not in paths or "data_dir" not in paths:
        return {}
    default = _paths_preset()["data_dir"]
    probe = OmegaConf.create({"paths": {**_paths_preset(), "root_dir": paths["root_dir"]}})
    why = (f"paths.root_dir feeds only the default of paths.data_dir ({default} in "
           f"conf/paths/default.yaml), and here ")
    if OmegaConf.select(probe, "paths.data_dir") != paths["data_dir"]:
        return {"paths.root_dir": why + f"paths.data_dir is given ({paths['data_dir']}); give the data "
                                        f"folder as paths.data_dir"}
    if not _reads(probe, "paths.data_dir", "paths.root_dir"):
        return {"paths.root_dir": why + f"$ATTNFLOW_DATA_DIR sets paths.data_dir ({paths['data_dir']}); "
                                        f"give the data folder as paths.data_dir"}
    if data_dir_why:
        return {"paths.root_dir": why + f"paths.data_dir does nothing: {data_dir_why}"}
    return {}


def _reads(cfg: DictConfig, field: str, other: str) -> bool:
    """Whether ``field``'s value in ``cfg`` changes with ``other``'s (an ``${oc.env:VAR,default}``
    whose variable is set does not read what its default names); a value that cannot be
    resolved is taken to read it."""
    values = set()
    for sentinel in ("/attnflow-probe-a", "/attnflow-probe-b"):
        probe = cfg.copy()
        try:
            OmegaConf.update(probe, other, sentinel, force_add=True)
            values.add(str(OmegaConf.select(probe, field, throw_on_missing=True)))
        except Exception:  # noqa: BLE001  (an unset variable, a resolver's error: read, to be safe)
            return True
    return len(values) > 1


def read_keys(cfg: DictConfig, hydra_reads: Iterable[str] = ()) -> set:
    """The keys an unresolved, composed config reads through interpolations
    (:func:`referenced_keys`, and ``hydra_reads``: :func:`hydra_references`), where a ``paths``
    field's own interpolations count only where that field is read and its value does depend on
    them: ``paths.data_dir``'s default names ``paths.root_dir``, read only where some field is
    built from paths.data_dir and ``$ATTNFLOW_DATA_DIR`` does not set it."""
    tree = OmegaConf.to_container(cfg, resolve=False)
    paths = tree.pop("paths", None) or {}
    read = referenced_keys(tree) | set(hydra_reads)
    probe = OmegaConf.create({"paths": paths})  # (a paths field built from another key: read)
    todo = [key for key in read if key.startswith("paths.")]
    while todo:
        field = todo.pop()
        value = paths.get(field.split(".", 1)[1]) if field.count(".") == 1 else None
        for key in referenced_keys([value]) - read:
            if _reads(probe, field, key):
                read.add(key)
                todo.append(key)
    return read


def inert_fields(resolved: Mapping[str, Any]) -> Dict[str, str]:
    """{config path: why it does nothing} for a validated, resolved run config: the data, model
    and task trees, the Trainer, the callbacks' typed configs, ``paths.data_dir`` and
    ``paths.root_dir`` (read only through interpolations: :func:`unread_overrides` weighs them)."""
    from attnflow.training.validate import CALLBACK_FIELDS  # (run imports this module)

    out = _trainer_inert(resolved.get("trainer") or {}, resolved.get("test", True),
                         resolved.get("callbacks"), resolved.get("logger"))
    out.update(_validation_off_inert(resolved))
    data_dir = _data_dir_inert(resolved.get("data"))
    out.update(data_dir)
    out.update(_root_dir_inert(resolved.get("paths") or {}, data_dir.get("paths.data_dir")))
    for group, registry in _GROUPS:
        out.update(registry.inert_fields(registry.validate(resolved[group], group), group))
    for key, value in (resolved.get("callbacks") or {}).items():
        schema = CALLBACK_FIELDS.get(key)
        if isinstance(value, dict) and hasattr(schema, "inert_fields"):
            fields = {**dataclasses.asdict(schema()), **value}
            out.update({f"callbacks.{key}.{k}": why.replace("{at}", f"callbacks.{key}.")
                        for k, why in schema.inert_fields(fields, resolved).items()})
    return out


_REFERENCE = re.compile(r"\$\{\s*([A-Za-z_][\w.]*)\s*\}")


def leaf_paths(node: Any, prefix: str = "") -> Iterator[Tuple[str, Any]]:
    """(dotted path, value) of each leaf of a plain config tree, in its order (a list is a leaf)."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield from leaf_paths(value, f"{prefix}.{key}" if prefix else str(key))
    else:
        yield prefix, node


def referenced_keys(cfg: Any) -> set:
    """The dotted keys that interpolations in an unresolved config read (``model.layers:
    ${data.num_hops}`` → ``data.num_hops``): such a field is read through them, whatever its own
    block does with it."""
    node = OmegaConf.to_container(cfg, resolve=False) if isinstance(cfg, DictConfig) else cfg
    out, todo = set(), [node]
    while todo:
        item = todo.pop()
        if isinstance(item, dict):
            todo.extend(item.values())
        elif isinstance(item, list):
            todo.extend(item)
        elif isinstance(item, str):
            out.update(_REFERENCE.findall(item))
    return out


def hydra_references(cfg: Any) -> set:
    """The keys that Hydra's own settings read through interpolations (a typed
    ``hydra.run.dir='${paths.data_dir}/runs'``): read by Hydra, whatever the run does with them.
    From a composed config's ``hydra`` node, else from the running app's; Hydra's record of the
    overrides and its runtime values are left out (copies of what the run's config holds)."""
    from hydra.core.hydra_config import HydraConfig

    if isinstance(cfg, DictConfig) and "hydra" in cfg:
        node = cfg.hydra
    elif HydraConfig.initialized():
        node = HydraConfig.get()
    else:
        return set()
    tree = OmegaConf.to_container(node, resolve=False)
    return referenced_keys({k: v for k, v in tree.items() if k not in ("overrides", "runtime")})


def unread_overrides(resolved: Mapping[str, Any], overrides: Optional[Iterable[str]],
                     referenced: Iterable[str] = ()) -> Dict[str, Tuple[str, str]]:
    """{config path: (the override as typed, the refusal)} of each command-line override of a
    field this config leaves unread ({} where no command line is known); a field that an
    interpolation reads (``referenced``: :func:`referenced_keys`) is read."""
    typed = typed_fields(overrides or ())
    if not typed:
        return {}
    read = set(referenced)
    out = {}
    for path, why in inert_fields(resolved).items():
        if any(r == path or r.startswith(path + ".") for r in read):
            continue
        hits = [k for k in typed if k == path or k.startswith(path + ".")]
        if hits:
            shown = typed[hits[0]]
            out[path] = (shown, f"{shown} (at '{path}') does nothing: {why}. Drop the override, "
                                f"or change the field that leaves it unread")
    return out


def typed_groups(overrides: Optional[Iterable[str]]) -> Optional[set]:
    """The top-level keys the command line set (``scorer=dot``, ``scorer.hidden_dim=3`` →
    ``scorer``), or None where no command line is known."""
    if overrides is None:
        return None
    return {re.split(r"[./=@]", str(o).lstrip("+~"), maxsplit=1)[0] for o in overrides}
