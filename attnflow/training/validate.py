"""A run config, composed by Hydra, resolved and validated once before any work: block names
and fields against the registries, the shared-group contract, the trainer and callbacks
(:mod:`attnflow.training.trainer_checks`), and one build of the model on the meta device."""

from __future__ import annotations


import copy
import dataclasses
import functools
import re
from typing import Any, Dict, List

import torch
from omegaconf import DictConfig, OmegaConf, open_dict

import attnflow  # noqa: F401  (the ${attnflow_root:} resolver of conf/paths)
from attnflow.blocks.attention.multihead import check_heads
from attnflow.blocks.positional.learned import check_table_covers
from attnflow.training.callbacks import (MATMUL_PRECISIONS, AttentionMapsConfig,
                                CheckpointConfig, EarlyStoppingConfig)
from attnflow.io.console import BARS
from attnflow import config_dir
from attnflow.training import averaging  # callbacks.average: checkpoint averaging
from attnflow.training.ema import EMAConfig  # callbacks.ema
from attnflow.config.groups import (drop_swapped_block_fields, fill_default_blocks, prune_unused,
                             top_level_keys, top_level_refusal, unused_groups)
from attnflow.training.loggers import (LOGGER_CONFIG)
from attnflow.config.overrides import command_line, typed_groups
from attnflow.config.registry import (DATA, ENCODERS, MODELS, TASKS, ConfigError, suggest,
                               build_config)

from attnflow.training.trainer_checks import check_trainer

# The top-level blocks validated by a registry; a shared group (scorer, attention, ...) is
# validated where the model reads it, its message noting the interpolation it came through.
BLOCK_GROUPS = [("data", DATA), ("model", MODELS), ("task", TASKS),
                ("logger", LOGGER_CONFIG)]  # a mapping logger name -> fields (attnflow.training.loggers)

CALLBACK_FIELDS = {  # a dataclass: the entry's typed config (names, types, ranges: build_config)
    "checkpoint": CheckpointConfig,
    "early_stopping": EarlyStoppingConfig,
    "attention_maps": AttentionMapsConfig,
    "progress_bar": None,  # one of attnflow.io.console.BARS: auto rich tqdm text none
    "lr_monitor": None,  # bool
    "average": averaging.AverageConfig,  # {last: N} or {best: N} (+ monitor, mode)
    "ema": EMAConfig,  # {decay: β} (+ start_step, every_n_steps)
}


def validate_config(cfg: Dict[str, Any]) -> None:
    """Raise :class:`ConfigError` for any unknown block name or bad field in ``cfg``."""
    known = top_level_keys(config_dir())
    for key in cfg:
        if key not in known:
            raise ConfigError(top_level_refusal(key, known))
    checked = dict(cfg)  # the blocks with their defaults, each validated here once
    for group, registry in BLOCK_GROUPS:
        if group in cfg and cfg[group] is not None:
            checked[group] = registry.validate(cfg[group], group)
        elif group in ("data", "model", "task"):
            raise ConfigError(f"the config has no '{group}': choose one with {group}=NAME")
    check_trainer(cfg.get("trainer") or {})
    for key, value in (cfg.get("callbacks") or {}).items():
        if key not in CALLBACK_FIELDS:
            raise ConfigError(f"callbacks has no entry '{key}' (at 'callbacks.{key}'); entries: "
                              f"{', '.join(CALLBACK_FIELDS)}.{suggest(key, CALLBACK_FIELDS)}")
        fields = CALLBACK_FIELDS[key]
        if fields is not None and value is not None and not isinstance(value, dict):
            names = ", ".join(f.name for f in dataclasses.fields(fields))
            raise ConfigError(f"callbacks.{key} must be a mapping of its fields ({names}) or null, "
                              f"got {value!r}")
        if fields is not None and isinstance(value, dict):
            build_config(fields, value, f"callbacks.{key}", f"callbacks.{key}")
    task_cls = TASKS.get(cfg["task"]["name"])  # callbacks.average: its monitor, a metric it logs
    averaging.check_config(cfg.get("callbacks") or {},
                           lambda: metric_names(task_cls, cfg) if getattr(task_cls, "metrics", None) else [])
    matmul = cfg.get("float32_matmul_precision")
    if matmul not in (None, *MATMUL_PRECISIONS):
        raise ConfigError(f"float32_matmul_precision must be one of {', '.join(MATMUL_PRECISIONS)} "
                          f"(torch.set_float32_matmul_precision: high uses TF32 tensor cores) or "
                          f"null (PyTorch's setting as it is), got {matmul!r}")
    bar = (cfg.get("callbacks") or {}).get("progress_bar", "auto")
    if bar not in (*BARS, None):
        raise ConfigError(f"callbacks.progress_bar must be one of {', '.join(BARS)} (auto: rich on a "
                          f"terminal, else text lines), got {bar!r}")
    lr_monitor = (cfg.get("callbacks") or {}).get("lr_monitor")
    if not isinstance(lr_monitor, (bool, type(None))):  # any other value would switch it on
        raise ConfigError(f"callbacks.lr_monitor must be true or false (log the learning rate every "
                          f"step), got {lr_monitor!r}")
    _check_root_fields(cfg)
    check_composition(checked)
    check_model_builds(checked)


@functools.lru_cache(maxsize=1)
def _paths_fields() -> List[str]:
    """The fields of conf/paths/default.yaml, read once."""
    return list(OmegaConf.load(config_dir() / "paths" / "default.yaml").keys())


def _check_root_fields(cfg: Dict[str, Any]) -> None:
    """The root config's own fields (conf/train.yaml) and ``paths.*``: another type would fail
    late (a seed numpy refuses, after the run directory is made; ``resume=5``) or do something
    unasked (``test=maybe`` tests; a misspelt ``paths.data_dri`` is ignored)."""
    seed = cfg.get("seed", 1234)
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2 ** 32:
        raise ConfigError(f"seed must be an int in [0, 2^32 - 1] (what numpy and Lightning seed "
                          f"with), got {seed!r}")
    if not isinstance(cfg.get("test", True), bool):
        raise ConfigError(f"test must be true or false (evaluate the best checkpoint on the test "
                          f"split after training), got {cfg['test']!r}")
    for key in ("resume", "ckpt_path", "optimized_metric"):
        if not isinstance(cfg.get(key), (str, type(None))):
            raise ConfigError(f"{key} must be a string or null, got {cfg[key]!r}")
    paths = cfg.get("paths") or {}
    known = _paths_fields()
    for key, value in paths.items():
        if key not in known:
            raise ConfigError(f"paths has no field '{key}' (at 'paths.{key}'); fields: "
                              f"{', '.join(known)}.{suggest(key, known)}")
        if not isinstance(value, str):
            raise ConfigError(f"paths.{key} (at 'paths.{key}') must be a path (a string), got {value!r}")


# What a data module gives, and what a model or task works on: the ``interface`` class attribute
# of data modules, models and tasks (None: not declared, not checked).
INTERFACES = {"seq2seq": "sequence pairs (source and target token ids)",
              "documents": "labelled documents (sentences × words)",
              "graph": "graphs (node features, edges, node labels)",
              "pretraining": "unlabelled text as sentence pairs (MLM and NSP batches)",
              "text_classification": "labelled texts (token ids, one label per text)",
              "multitask": "several tasks' data at once (a batch of each per step)",
              "captioning": "images with captions (pixels or region features, caption token ids)"}


def _interface(cls: Any, block_cfg: Dict[str, Any]) -> Any:
    """What a block of this config works on: its class's ``interface``, or, for a class whose
    batches depend on a field (BERT's ``head``), its ``interface_of(config)``."""
    of = getattr(cls, "interface_of", None)
    return of(block_cfg) if of is not None else getattr(cls, "interface", None)


def _works_on(cls: Any, interface: str) -> bool:
    """Whether some config of ``cls`` works on ``interface`` (a class whose interface depends on
    its config lists them all in ``interfaces``)."""
    return interface == getattr(cls, "interface", None) or interface in getattr(cls, "interfaces", ())


def _check_encoder_kinds(model_cfg: Dict[str, Any]) -> None:
    """An image encoder (``input_kind`` 'image' or 'image_features': ``forward(images)``) in a
    model that reads token sequences (``forward(x, lengths)``) would fail only at the first
    batch; refused here, naming the field and the encoders that fit. A model that takes images
    says so with ``image_encoders = True``."""
    if getattr(MODELS.get(model_cfg["name"]), "image_encoders", False):
        return
    for key, value in model_cfg.items():
        if not (key.endswith("encoder") and isinstance(value, dict)) or value.get("name") not in ENCODERS:
            continue
        kind = getattr(ENCODERS.get(value["name"]), "input_kind", None)
        if kind:
            text = [n for n in ENCODERS.names() if not getattr(ENCODERS.get(n), "input_kind", None)]
            raise ConfigError(f"model.{key}: encoder '{value['name']}' reads {kind.replace('_', ' ')}s, "
                              f"but model '{model_cfg['name']}' gives it token sequences; encoders "
                              f"for sequences: {', '.join(text)}")


def _check_own_encoder(cfg: Dict[str, Any]) -> None:
    """A model's own encoder (``model.encoder``: seq2seq's or self_attentive's), with messages
    naming its own fields (the meta build names the shared ``attention`` group, which these models
    do not read): its attention's heads divide its width, and a bounded positional table
    (``learned``) covers the longest input the data gives it (the data class's
    ``longest_source_positions``, else ``longest_positions``), which it refuses only at the first
    such batch."""
    encoder = cfg["model"].get("encoder")
    if not isinstance(encoder, dict):
        return
    attention, positional = encoder.get("attention"), encoder.get("positional")
    width = encoder.get("d_model") or cfg["model"].get("embed_dim")
    if isinstance(attention, dict) and "heads" in attention and isinstance(width, int):
        check_heads(attention["name"], width, attention["heads"], attention.get("head_dim"),
                    at="model.encoder.attention", size="model.encoder.d_model, else model.embed_dim")
    if isinstance(positional, dict) and positional.get("max_len"):
        data = DATA.get(cfg["data"]["name"])
        longest = next((hook(cfg["data"]) for hook in (getattr(data, "longest_source_positions", None),
                                                       getattr(data, "longest_positions", None))
                        if hook is not None and hook(cfg["data"])), None)
        check_table_covers(positional, longest, "model.encoder.positional", " the encoder",
                           "model.encoder.positional.name=sinusoidal")


def check_model_builds(cfg: Dict[str, Any]) -> None:
    """The model is built from its config on the meta device (shapes, no memory, no data) with the
    data's stand-in context (its class's ``placeholder_context``): a config its constructor or a
    child block's refuses — heads that do not divide a width, a scorer that needs equal sizes, an
    output aggregator that does not give the classes — is refused here, before the data is read
    and before the run folder is written, rather than after. Only what depends on the config alone
    is found: the stand-in sizes are chosen to pass every check that compares real ones (both
    vocabularies the same size), and a data module without stand-ins (its sizes are in its files)
    skips this. An error the meta device itself raises leaves the decision to the real build."""
    stand_in = getattr(DATA.get(cfg["data"]["name"]), "placeholder_context", None)
    context = stand_in(cfg["data"]) if stand_in is not None else None
    if context is None:
        return
    model_cfg = dict(cfg["model"])
    if model_cfg.get("init_from"):  # the weights are not the question here: no file is read
        model_cfg["init_from"] = None
    try:
        with torch.device("meta"):
            MODELS.create(model_cfg, **context)
    except ConfigError:
        raise
    except ValueError as err:  # a block's own refusal of its fields (its message names them)
        raise ConfigError(str(err)) from None
    except Exception:  # noqa: BLE001 — an operation the meta device lacks, not the config's fault
        return


def check_composition(cfg: Dict[str, Any]) -> None:
    """Data, model and task fit together (by their ``interface``; the classes' ``check_config``,
    given ``cfg`` with the validated blocks), and an explicit checkpoint or early-stopping
    ``monitor`` is a metric the task logs; before any data is made."""
    picked = [(group, cfg[group]["name"], reg) for group, reg in
              (("data", DATA), ("model", MODELS), ("task", TASKS))]
    _check_encoder_kinds(cfg["model"])
    _check_own_encoder(cfg)
    for group, name, reg in picked:  # composite blocks (multitask): their parts fit, first
        check = getattr(reg.get(name), "check_config", None)
        if check is not None:
            check(cfg)
    ifaces = [(group, name, _interface(reg.get(name), cfg[group])) for group, name, reg in picked]
    declared = [i for _, _, i in ifaces if i]
    if len(set(declared)) > 1:
        ref = ifaces[0][2] or declared[0]  # what the data gives, if it says
        fits = {i: {g: [n for n in reg.names() if _works_on(reg.get(n), i)]
                    for g, _, reg in picked} for i in set(declared)}

        def works_on(i):
            return (f"{INTERFACES.get(i, i)} (data {', '.join(fits[i]['data']) or '-'}; models "
                    f"{', '.join(fits[i]['model']) or '-'}; tasks {', '.join(fits[i]['task']) or '-'})")

        (dg, dn, di), *others = ifaces
        lines = [f"{g} '{n}' works on {works_on(i)}" for g, n, i in others if i and i != ref]
        lines.append(f"data '{dn}' gives {works_on(di)}" if di else
                     f"the rest works on {works_on(ref)}")
        raise ConfigError(f"data '{dn}', model '{ifaces[1][1]}' and task '{ifaces[2][1]}' do not fit "
                          f"together: " + "; ".join(lines))
    task = TASKS.get(cfg["task"]["name"])
    for key in ("checkpoint", "early_stopping"):
        entry = (cfg.get("callbacks") or {}).get(key)
        if not isinstance(entry, dict):
            continue
        monitor = entry.get("monitor")
        metrics = getattr(task, "metrics", None)
        if monitor is None or not metrics:
            continue
        names = metric_names(task, cfg)
        if monitor not in names:
            raise ConfigError(
                f"callbacks.{key}.monitor '{monitor}' is not a metric that task '{cfg['task']['name']}' "
                f"logs; it logs {', '.join(names)} (null: its default, {task.monitor})."
                f"{suggest(monitor, names)}")


def metric_names(task: Any, cfg: Dict[str, Any], splits=("train", "val")) -> List[str]:
    """``<split>/<metric>`` that task class ``task`` logs with this config: its
    ``metric_names_of(task config)`` (a conditional metric, e.g. ``penalty``, only where its weight
    is set; multitask: its tasks'), else its class's."""
    of = getattr(task, "metric_names_of", None)
    return of(cfg["task"], splits) if of is not None else task.metric_names(splits)


def _choices(cfg: DictConfig) -> Dict[str, Any]:
    """Hydra's group choices of this run, when Hydra composed it (else {})."""
    from hydra.core.hydra_config import HydraConfig

    if HydraConfig.initialized():
        return dict(HydraConfig.get().runtime.choices)
    if "hydra" in cfg:
        return dict(cfg.hydra.runtime.choices)
    return {}


def resolve_config(cfg: DictConfig | Dict[str, Any]) -> Dict[str, Any]:
    """The run's resolved, validated config. A composed (unresolved) config goes through the
    shared-group contract first (:mod:`attnflow.config.groups`): a group the model does not use
    is refused when set, and left out of the result."""
    typed = None
    if not isinstance(cfg, DictConfig):
        resolved = dict(cfg)
    else:
        choices, typed = _choices(cfg), command_line(cfg)
        cfg = copy.deepcopy(cfg)
        if "hydra" in cfg:  # composed with return_hydra_config: Hydra's own node is not the run's
            with open_dict(cfg):
                del cfg["hydra"]
        drop_swapped_block_fields(cfg, typed or ())  # model.encoder.name=…: the old block's fields
        fill_default_blocks(cfg, typed or ())  # model.encoder.attention.heads=4: its default block
        consumed, groups = unused_groups(cfg, config_dir(), choices, typed_groups(typed), typed)
        if groups:
            raise ConfigError(next(iter(groups.values())))
        resolved = prune_unused(OmegaConf.to_container(cfg, resolve=True), consumed)
    try:
        validate_config(resolved)
    except ConfigError as err:  # a field that takes its value from another: say which
        shown = _as_typed(cfg, str(err)) if isinstance(cfg, DictConfig) else str(err)
        if shown == str(err):
            raise
        raise ConfigError(shown) from None
    return resolved


def _as_typed(cfg: DictConfig, message: str) -> str:
    """``message`` naming the field the user set where the path it names (``at
    'model.decoder.attention.scorer.hidden'``) passes through an interpolation of the composed
    config: a block taken whole from another key (``scorer: ${scorer}``) is named there
    (``scorer.hidden``); a field whose value comes from another gets a note naming that one."""
    found = re.search(r"at '([\w.]+)'", message)
    parts = found.group(1).split(".") if found else []
    for end in range(len(parts), 0, -1):
        parent = (OmegaConf.select(cfg, ".".join(parts[:end - 1]), throw_on_resolution_failure=False)
                  if end > 1 else cfg)
        key = parts[end - 1]
        if isinstance(parent, DictConfig) and key in parent and OmegaConf.is_interpolation(parent, key):
            source = OmegaConf.to_container(parent, resolve=False)[key]
            whole = re.fullmatch(r"\$\{([\w.]+)\}", source)
            if whole and end < len(parts):
                return message.replace(found.group(1), ".".join([whole.group(1), *parts[end:]]))
            return f"{message} ({'.'.join(parts[:end])} is {source} in this config: the value comes from there)"
    return message
