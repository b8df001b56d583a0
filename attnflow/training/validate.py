"""A run config, composed by Hydra, resolved and validated once before any work: block names
and fields against the registries, the shared-group contract, the trainer and callbacks, and
one build of the model on the meta device."""

from __future__ import annotations

import copy
import functools
import re
from typing import Any, Dict, List, Type

import torch
from omegaconf import DictConfig, OmegaConf, open_dict

import attnflow  # noqa: F401  (the ${attnflow_root:} resolver of conf/paths)
from attnflow import config_dir
from attnflow.blocks.attention.multihead import check_heads
from attnflow.blocks.positional.learned import check_table_covers
from attnflow.config.contracts import TaskContract
from attnflow.config.groups import (SHARED_GROUPS, drop_swapped_block_fields, fill_default_blocks,
                                    prune_unused, top_level_keys, top_level_refusal, unused_groups)
from attnflow.config.own_data import fit_to_given_data
from attnflow.config.overrides import command_line, typed_fields, typed_groups
from attnflow.config.secrets import leaves, resolve_env
from attnflow.config.registry import (DATA, ENCODERS, MODELS, TASKS, ConfigError, Registry,
                                      build_config, suggest)
from attnflow.io.console import BARS
from attnflow.training import averaging
from attnflow.training.callbacks import (MATMUL_PRECISIONS, AttentionMapsConfig, CheckpointConfig,
                                         EarlyStoppingConfig)
from attnflow.training.ema import EMAConfig
from attnflow.training.loggers import LOGGER_CONFIG, hydra_config
from attnflow.training.trainer_checks import check_trainer

# The top-level blocks a registry validates (a shared group: where the model reads it).
BLOCK_GROUPS = [("data", DATA), ("model", MODELS), ("task", TASKS), ("logger", LOGGER_CONFIG)]

CALLBACK_FIELDS = {  # a dataclass: the entry's typed config (None: one value, see ROOT_CHOICES)
    "checkpoint": CheckpointConfig,
    "early_stopping": EarlyStoppingConfig,
    "attention_maps": AttentionMapsConfig,
    "progress_bar": None,
    "lr_monitor": None,
    "average": averaging.AverageConfig,
    "ema": EMAConfig,
}
# Fields of a few values, the first their default (``test=maybe`` would test).
ROOT_CHOICES = {"test": (True, False), "float32_matmul_precision": (None, *MATMUL_PRECISIONS),
                "callbacks.progress_bar": (None, *BARS), "callbacks.lr_monitor": (None, True, False)}


def validate_config(cfg: Dict[str, Any]) -> Dict[str, Any]:
    """``cfg`` with every block's defaults filled in (data, model, task, loggers), or a
    :class:`ConfigError` for any unknown block name or bad field."""
    known = top_level_keys(config_dir())
    unknown = next((k for k in cfg if k not in known), None)
    if unknown is not None:
        raise ConfigError(top_level_refusal(unknown, known))
    for at, value in leaves(cfg):  # (what torch, Lightning's counters and a checkpoint hold)
        if type(value) is int and not -2**63 <= value < 2**63:
            raise ConfigError(f"{at}={value} is beyond a 64-bit integer (what torch and the "
                              f"checkpoints hold); give a smaller number (a limit: -1 or null for none)")
    checked = dict(cfg)  # the blocks with their defaults, each validated here once
    for group, registry in BLOCK_GROUPS:
        if group in cfg and cfg[group] is not None:
            checked[group] = registry.validate(cfg[group], group)
        elif group in ("data", "model", "task"):
            raise ConfigError(f"the config has no '{group}': choose one with {group}=NAME")
    for group in SHARED_GROUPS:  # (as the model that consumes them reads them)
        if isinstance(cfg.get(group), dict):
            checked[group] = Registry.kinds()[group].validate(cfg[group], group)
    if cfg.get("trainer"):  # its values typed as the Trainer's arguments: checked here only
        checked["trainer"] = check_trainer(cfg["trainer"])
    for key, value in (cfg.get("callbacks") or {}).items():
        if key not in CALLBACK_FIELDS:
            raise ConfigError(f"callbacks has no entry '{key}' (at 'callbacks.{key}'); entries: "
                              f"{', '.join(CALLBACK_FIELDS)}.{suggest(key, CALLBACK_FIELDS)}")
        if CALLBACK_FIELDS[key] is not None and value is not None:
            build_config(CALLBACK_FIELDS[key], value, f"callbacks.{key}", f"callbacks.{key}")
    averaging.check_config(cfg.get("callbacks") or {})
    _check_root_fields(cfg)
    check_composition(checked)
    check_model_builds(checked)
    return checked


@functools.lru_cache(maxsize=1)
def _paths_fields() -> List[str]:
    return list(OmegaConf.load(config_dir() / "paths" / "default.yaml").keys())


def _yaml(value: Any) -> str:
    return "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)


def _check_root_fields(cfg: Dict[str, Any]) -> None:
    """The root config's own fields (conf/train.yaml) and ``paths.*``."""
    seed = cfg.get("seed", 1234)
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2 ** 32:
        raise ConfigError(f"seed must be an int in [0, 2^32 - 1] (what numpy and Lightning seed "
                          f"with), got {seed!r}")
    for key, options in ROOT_CHOICES.items():
        section, _, name = key.rpartition(".")
        value = ((cfg.get(section) or {}) if section else cfg).get(name, options[0])
        if not any(value == o and type(value) is type(o) for o in options):
            raise ConfigError(f"{key} must be one of {', '.join(map(_yaml, options))}, got {value!r}")
    for key in ("resume", "ckpt_path"):
        if not isinstance(cfg.get(key), (str, type(None))):
            raise ConfigError(f"{key} must be a string or null, got {cfg[key]!r}")
    metric = cfg.get("optimized_metric")
    metrics = metric if isinstance(metric, (list, tuple)) else [metric]
    if metric is not None and not (metrics and all(isinstance(m, str) for m in metrics)):
        raise ConfigError(f"optimized_metric must be a metric's name, a list of names (several "
                          f"objectives) or null, got {metric!r}")
    known = _paths_fields()
    for key, value in (cfg.get("paths") or {}).items():
        if key not in known:
            raise ConfigError(f"paths has no field '{key}' (at 'paths.{key}'); fields: "
                              f"{', '.join(known)}.{suggest(key, known)}")
        if not isinstance(value, str):
            raise ConfigError(f"paths.{key} (at 'paths.{key}') must be a path (a string), got {value!r}")


# What a data module gives and a model or task works on (their class's ``interface``).
INTERFACES = {"seq2seq": "sequence pairs (source and target token ids)",
              "documents": "labelled documents (sentences × words)",
              "graph": "graphs (node features, edges, node labels)",
              "pretraining": "unlabelled text as sentence pairs (MLM and NSP batches)",
              "text_classification": "labelled texts (token ids, one label per text)",
              "token_classification": "tagged sentences (token ids, a tag per word)",
              "multitask": "several tasks' data at once (a batch of each per step)",
              "captioning": "images with captions (pixels or region features, caption token ids)"}


def _check_encoder_kinds(model_cfg: Dict[str, Any]) -> None:
    """An image encoder (``input_kind``) in a model that gives token sequences (no
    ``image_encoders``) would fail only at the first batch."""
    if MODELS.get(model_cfg["name"]).image_encoders:
        return
    for key, value in model_cfg.items():
        name = value.get("name") if key.endswith("encoder") and isinstance(value, dict) else None
        kind = ENCODERS.get(name).input_kind if name in ENCODERS else None
        if kind:
            text = [n for n in ENCODERS.names() if not ENCODERS.get(n).input_kind]
            raise ConfigError(f"model.{key}: encoder '{value['name']}' reads {kind.replace('_', ' ')}s, "
                              f"but model '{model_cfg['name']}' gives it token sequences; encoders "
                              f"for sequences: {', '.join(text)}")


def _check_own_encoder(cfg: Dict[str, Any]) -> None:
    """A model's own ``model.encoder``, named by its fields: its heads divide its width, and a
    bounded positional table covers the longest input the data gives (else refused only at the
    first such batch)."""
    encoder = cfg["model"].get("encoder")
    if not isinstance(encoder, dict):
        return
    attention, positional = encoder.get("attention"), encoder.get("positional")
    width = encoder.get("d_model") or cfg["model"].get("embed_dim")
    if isinstance(attention, dict) and "heads" in attention and isinstance(width, int):
        check_heads(attention["name"], width, attention["heads"], attention.get("head_dim"),
                    at="model.encoder.attention", size="model.encoder.d_model, else model.embed_dim")
    if isinstance(positional, dict) and positional.get("max_len"):
        longest = DATA.get(cfg["data"]["name"]).longest_source_positions(cfg["data"])
        check_table_covers(positional, longest, "model.encoder.positional", " the encoder",
                           "model.encoder.positional.name=sinusoidal")


def check_model_builds(cfg: Dict[str, Any]) -> None:
    """Build the model on the meta device with the data's stand-in sizes (``placeholder_context``;
    none: skipped), so a config a block's constructor refuses fails before any data is read. An
    error of the meta device itself leaves the decision to the real build."""
    context = DATA.get(cfg["data"]["name"]).placeholder_context(cfg["data"])
    if context is None:
        return
    # (no file is read here: no init_from)
    model_cfg = {**cfg["model"], "init_from": None} if cfg["model"].get("init_from") else cfg["model"]
    try:
        with torch.device("meta"):
            MODELS.create(model_cfg, **context)
    except ConfigError:
        raise
    except ValueError as err:  # a block's refusal of its fields
        raise ConfigError(str(err)) from None
    except Exception:  # noqa: BLE001 — an operation the meta device lacks, not the config's fault
        return


def check_composition(cfg: Dict[str, Any]) -> None:
    """Data, model and task fit together (``interface``; their ``check_config``), and a
    ``monitor`` given is a metric the task logs."""
    picked = [(group, cfg[group]["name"], reg) for group, reg in
              (("data", DATA), ("model", MODELS), ("task", TASKS))]
    _check_encoder_kinds(cfg["model"])
    _check_own_encoder(cfg)
    for group, name, reg in picked:  # (multitask: its parts fit, first)
        reg.get(name).check_config(cfg)
    ifaces = [(group, name, reg.get(name).interface_of(cfg[group])) for group, name, reg in picked]
    declared = [i for _, _, i in ifaces if i]
    if len(set(declared)) > 1:
        ref = ifaces[0][2] or declared[0]  # what the data gives, if it says

        def works_on(i):
            fit = [", ".join(n for n in r.names() if r.get(n).works_on(i)) or "-" for _, _, r in picked]
            return f"{INTERFACES.get(i, i)} (data {fit[0]}; models {fit[1]}; tasks {fit[2]})"

        (dg, dn, di), *others = ifaces
        lines = [f"{g} '{n}' works on {works_on(i)}" for g, n, i in others if i and i != ref]
        lines.append(f"data '{dn}' gives {works_on(di)}" if di else
                     f"the rest works on {works_on(ref)}")
        raise ConfigError(f"data '{dn}', model '{ifaces[1][1]}' and task '{ifaces[2][1]}' do not fit "
                          f"together: " + "; ".join(lines))
    task, callbacks = TASKS.get(cfg["task"]["name"]), cfg.get("callbacks") or {}
    for key in ("checkpoint", "early_stopping", "average"):
        entry = callbacks.get(key)
        monitor = entry.get("monitor") if isinstance(entry, dict) and task.metrics else None
        names = [] if monitor is None else metric_names(task, cfg)
        if monitor is not None and monitor not in names:
            raise ConfigError(
                f"callbacks.{key}.monitor '{monitor}' is not a metric that task '{cfg['task']['name']}' "
                f"logs; it logs {', '.join(names)} (null: its default, {task.monitor})."
                f"{suggest(monitor, names)}")


def metric_names(task: Type[TaskContract], cfg: Dict[str, Any], splits=("train", "val")) -> List[str]:
    """``<split>/<metric>`` that task class ``task`` logs with this config."""
    return task.metric_names_of(task.completed_task(cfg), splits)


def resolve_config(cfg: DictConfig | Dict[str, Any]) -> Dict[str, Any]:
    """The run's resolved, validated config with every block default filled in (what its
    loggers, ``config.yaml`` and checkpoints record). A composed config goes through the
    shared-group contract first (:mod:`attnflow.config.groups`)."""
    typed = None
    if not isinstance(cfg, DictConfig):  # (a recorded config: its ${oc.env:…} resolved again)
        resolved = resolve_env(dict(cfg))
    else:
        hc, typed = hydra_config(cfg), command_line(cfg)
        choices = {} if hc is None else dict(hc.runtime.choices)
        cfg = copy.deepcopy(cfg)
        if "hydra" in cfg:  # (return_hydra_config)
            with open_dict(cfg):
                del cfg["hydra"]
        drop_swapped_block_fields(cfg, typed or ())  # model.encoder.name=…: the old block's fields
        fill_default_blocks(cfg, typed or ())  # model.encoder.attention.heads=4: its default block
        consumed, groups = unused_groups(cfg, config_dir(), choices, typed_groups(typed), typed)
        if groups:
            raise ConfigError(next(iter(groups.values())))
        resolved = prune_unused(OmegaConf.to_container(cfg, resolve=True), consumed)
        fit_to_given_data(resolved, typed_fields(typed or ()))  # a preset's data-set facts
    name = (resolved.get("model") or {}).get("name")
    if name in MODELS:  # the fields its checkpoint decides (BERT from an HF checkpoint)
        MODELS.get(name).complete_config(resolved, typed_fields(typed or ()))
    task = resolved["task"].get("name") if isinstance(resolved.get("task"), dict) else None
    if isinstance(task, str) and task in TASKS:  # the fields its data decides (multitask's tasks)
        resolved["task"] = dict(TASKS.get(task).completed_task(resolved))
    try:
        return validate_config(resolved)
    except ConfigError as err:
        shown = _as_typed(cfg, str(err)) if isinstance(cfg, DictConfig) else str(err)
        if shown == str(err):
            raise
        raise ConfigError(shown) from None


def _as_typed(cfg: DictConfig, message: str) -> str:
    """``message`` naming the field the user set where its path (``at '…'``) passes through an
    interpolation: a block taken whole (``scorer: ${scorer}``) is named there, else a note."""
    found = re.search(r"at '([\w.]+)'", message)
    parts = found.group(1).split(".") if found else []
    for end in range(len(parts), 0, -1):
        parent = OmegaConf.select(cfg, ".".join(parts[:end - 1]), throw_on_resolution_failure=False)
        key = parts[end - 1]
        if isinstance(parent, DictConfig) and key in parent and OmegaConf.is_interpolation(parent, key):
            source = OmegaConf.to_container(parent, resolve=False)[key]
            whole = re.fullmatch(r"\$\{([\w.]+)\}", source)
            if whole and end < len(parts):
                return message.replace(found.group(1), ".".join([whole.group(1), *parts[end:]]))
            return f"{message} ({'.'.join(parts[:end])} is {source} in this config: the value comes from there)"
    return message
