"""Continuing a stopped run in its own directory: ``attnflow-train resume=<run dir>`` (or
``resume=last``).

A resumed run is the run's own config (the ``attnflow_config`` of its ``checkpoints/last.ckpt``,
which ``config.yaml`` must agree with), not a recomposition of ``conf/``: so it works for every
experiment, and nothing on the command line can silently change what is trained. Only overrides
that change how long it trains, on which device and in which precision (among those that keep
float32 weights, :data:`FLOAT32_WEIGHTS`), or how it is recorded are allowed (:data:`SAFE`); any
other is refused, naming it. The run continues from ``last.ckpt`` with its optimiser, scheduler,
random streams, data-loader position and W&B run id (:mod:`attnflow.training.state`).

Nothing of the run is lost: every check (the path, the checkpoint, the config, the overrides) runs
before Hydra starts, so a refused resume leaves the run directory as it was; Hydra writes no new
``.hydra/`` there (``hydra.output_subdir=null``), ``config.yaml`` is kept, and what a resume
changed is recorded beside it in ``resume-<n>.yaml``; the CSV/TensorBoard logs continue in a new
``version_<n>`` folder.

``ckpt_path=<file>`` is the lower-level field underneath: a *new* run (its own directory and
``config.yaml``) that starts from a checkpoint's full training state; its model, data and task
configs must equal the checkpoint's (checked, naming the fields that differ, before any work).

"Same experiment" (``resume=last``): the run's recorded Hydra choice
(``.hydra/hydra.yaml``: ``hydra.runtime.choices.experiment``, else ``config.yaml``'s
``run.experiment``) equals the ``experiment=`` on the command line (none: the default). The newest
run is the one whose ``last.ckpt`` was written last, under the output root (``paths.output_root=``
on the command line, else ``$ATTNFLOW_OUTPUT_DIR``, else ``outputs``).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

import yaml

from attnflow.config.registry import ConfigError

# attnflow.io.checkpoints and attnflow.training.state (torch, Lightning) are imported where a
# checkpoint is read: the console script's checks before Hydra (the output folders, a sweep's
# values) and a config Hydra refuses then cost no torch import (seconds in a fresh interpreter).

# Overrides that may come with resume= (each with the fields under it): how long the run trains
# (EXTEND: more or fewer epochs/steps, a time limit), on which device kind and with which float32
# matmul precision or mixed precision (trainer.precision: among FLOAT32_WEIGHTS only), and how it is
# recorded (loggers and their fields, tags; paths.output_root: where resume=last looks).
EXTEND = ("trainer.max_epochs", "trainer.max_steps", "trainer.max_time")
# The trainer.precision values that keep float32 weights and optimiser state (mixed precision casts
# only the computation): a resume may move among them, e.g. a bf16-mixed run continued with auto or
# 32-true on a CPU that emulates bf16 (attnflow.training.precision), but not to or from bf16-true/16-true
# (half-precision weights) or 64-true.
FLOAT32_WEIGHTS = ("32-true", "32", "bf16-mixed", "bf16", "16-mixed", "16", "auto")
SAFE = (*EXTEND, "trainer.accelerator", "trainer.precision", "trainer.enable_model_summary",
        "trainer.log_every_n_steps", "trainer.num_sanity_val_steps", "callbacks.progress_bar",
        "callbacks.lr_monitor", "callbacks.attention_maps", "logger", "tags", "test",
        "optimized_metric", "paths.output_root", "float32_matmul_precision")
# What records a run rather than defines it: never compared between a run and its checkpoint.
BOOKKEEPING = ("resume", "ckpt_path", "run", "tags", "logger", "paths", "hydra")
# What a checkpoint's state depends on (ckpt_path= into a new run must match these).
STATE_DEFINING = ("model", "data", "task")


class ResumeError(ConfigError):
    """A run that cannot be resumed as asked; the message says why and what to do."""


# -- small helpers ---------------------------------------------------------------------------------
def _is_safe(key: str) -> bool:
    return any(key == s or key.startswith(s + ".") for s in SAFE)


def _flatten(node: Any, prefix: str = "") -> Dict[str, Any]:
    if isinstance(node, dict) and node:
        out: Dict[str, Any] = {}
        for k, v in node.items():
            out.update(_flatten(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: node}


def differences(a: Dict[str, Any], b: Dict[str, Any], only: Sequence[str] = (),
                ignore: Sequence[str] = BOOKKEEPING) -> List[Tuple[str, Any, Any]]:
    """``(dotted key, value in a, value in b)`` wherever two configs differ, within the top-level
    sections ``only`` (all when empty), outside ``ignore``."""
    fa, fb = _flatten(a), _flatten(b)
    out = []
    for key in sorted(set(fa) | set(fb)):
        top = key.split(".", 1)[0]
        if (only and top not in only) or top in ignore:
            continue
        va, vb = fa.get(key, "<unset: its default>"), fb.get(key, "<unset: its default>")
        if va != vb:
            out.append((key, va, vb))
    return out


def _listing(diffs: List[Tuple[str, Any, Any]], a: str, b: str, most: int = 8) -> str:
    # block names first, outermost first: 'model.name' says more than a nested field
    diffs = sorted(diffs, key=lambda d: (not d[0].endswith(".name"), d[0].count("."), d[0]))
    parts = [f"{k}: {va!r} ({a}) vs {vb!r} ({b})" for k, va, vb in diffs[:most]]
    more = f"; and {len(diffs) - most} more" if len(diffs) > most else ""
    return "; ".join(parts) + more


def _get(cfg: Dict[str, Any], key: str) -> Any:
    node: Any = cfg
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def _set(cfg: Dict[str, Any], key: str, value: Any) -> None:
    *parents, leaf = key.split(".")
    node = cfg
    for part in parents:
        if not isinstance(node.get(part), dict):
            node[part] = {}
        node = node[part]
    node[leaf] = value


def _upgrade(cfg: Dict[str, Any]) -> Dict[str, Any]:
    """A saved config in today's layout: :func:`attnflow.io.checkpoints.upgrade_config`, and the
    logger's old ``{name: wandb, project: …}`` as the mapping ``{wandb: {project: …}}``."""
    from attnflow.io.checkpoints import upgrade_config

    cfg = upgrade_config(dict(cfg))
    logger = cfg.get("logger")
    if isinstance(logger, dict) and isinstance(logger.get("name"), str):
        fields = {k: v for k, v in logger.items() if k != "name"}
        cfg["logger"] = {} if logger["name"] == "none" else {logger["name"]: fields}
    return cfg


# -- the run to resume ------------------------------------------------------------------------------
def _quote(value: str) -> str:
    """A Hydra override value: plain when it is a plain path, else single-quoted."""
    if re.fullmatch(r"[\w./-]+", value):
        return value
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def run_experiment(run_dir: Path) -> Optional[str]:
    """The experiment a run was composed with (None: the default)."""
    hydra_yaml = run_dir / ".hydra" / "hydra.yaml"
    exp = None
    try:
        if hydra_yaml.is_file():
            data = yaml.safe_load(hydra_yaml.read_text()) or {}
            exp = (((data.get("hydra") or {}).get("runtime") or {}).get("choices") or {}).get("experiment")
        else:
            data = yaml.safe_load((run_dir / "config.yaml").read_text()) or {}
            exp = (data.get("run") or {}).get("experiment")
    except (OSError, yaml.YAMLError):
        return None
    return None if exp in (None, "default") else str(exp)


def output_root(overrides: Dict[str, str]) -> Path:
    """Where runs are written: ``paths.output_root=`` on the command line, else the config's
    default (``$ATTNFLOW_OUTPUT_DIR``, else ``outputs``)."""
    if overrides.get("paths.output_root"):
        return Path(overrides["paths.output_root"])
    return Path(os.environ.get("ATTNFLOW_OUTPUT_DIR") or "outputs")


def find_last(root: Path, experiment: Optional[str]) -> Path:
    """The run of ``experiment`` under ``root`` whose ``last.ckpt`` was written last."""
    if not root.is_dir():
        raise ResumeError(f"resume=last: the output root {root} does not exist (set "
                          f"paths.output_root=… or $ATTNFLOW_OUTPUT_DIR, or name the run: resume=<run dir>)")
    runs = sorted((p for p in root.rglob("last.ckpt") if p.parent.name == "checkpoints"),
                  key=lambda p: p.stat().st_mtime, reverse=True)
    others = []
    for last in runs:
        run = last.parent.parent
        exp = run_experiment(run)
        if exp == experiment:
            return run.resolve()
        others.append(f"{run} ({exp or 'default'})")
    name = experiment or "default"
    seen = f"; runs found: {', '.join(others[:5])}" if others else ""
    raise ResumeError(f"resume=last: no run of experiment '{name}' with checkpoints/last.ckpt under "
                      f"{root}{seen}. Name the experiment (experiment=NAME resume=last) or the run "
                      f"(resume=<run dir>)")


def check_run(run_dir: Path | str) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """(the run's config, its ``last.ckpt``), or a :class:`ResumeError` saying what is wrong."""
    run = Path(run_dir)
    if not run.exists():
        raise ResumeError(f"resume={run}: no such directory")
    if not run.is_dir():
        raise ResumeError(f"resume={run}: not a directory; name the run directory (the folder "
                          f"holding config.yaml and checkpoints/), e.g. outputs/<date>/<time>")
    cfg_file, last = run / "config.yaml", run / "checkpoints" / "last.ckpt"
    if not cfg_file.is_file():
        raise ResumeError(f"resume={run}: not an attnflow run directory (no config.yaml; a run "
                          f"directory of attnflow-train holds config.yaml and checkpoints/)")
    if not last.is_file():
        others = sorted(p.name for p in (run / "checkpoints").glob("*.ckpt")) if (run / "checkpoints").is_dir() else []
        try:  # why there is none: the run's config may say
            saved = yaml.safe_load(cfg_file.read_text())
            unwritten = "checkpoint" in saved["callbacks"] and saved["callbacks"]["checkpoint"] is None
        except (yaml.YAMLError, TypeError, KeyError):
            unwritten = False
        hint = (f". Its checkpoints: {', '.join(others)}; to start a new run from one of them: "
                f"ckpt_path={run / 'checkpoints' / others[0]}" if others else
                " (it was trained with callbacks.checkpoint=null, which writes none: nothing to "
                "continue; train it again with checkpoints)" if unwritten else
                " (it stopped before its first epoch ended: nothing to continue; train it again)")
        raise ResumeError(f"resume={run}: the run has no checkpoints/last.ckpt{hint}")
    try:
        cfg = yaml.safe_load(cfg_file.read_text())
    except yaml.YAMLError as err:
        raise ResumeError(f"resume={run}: {cfg_file} is not valid YAML: {str(err).splitlines()[0]}") from None
    if not isinstance(cfg, dict) or not isinstance(cfg.get("model"), dict):
        raise ResumeError(f"resume={run}: {cfg_file} is not an attnflow run config (no model)")
    from attnflow.io.checkpoints import CheckpointError
    from attnflow.training.state import load_checkpoint_file

    try:
        ckpt = load_checkpoint_file(last, mmap=True)
    except CheckpointError as err:
        raise ResumeError(f"resume={run}: {err}. The run cannot continue from it; its other "
                          f"checkpoints (if any) start a new run with ckpt_path=…") from None
    saved = ckpt.get("attnflow_config")
    if not isinstance(saved, dict):
        raise ResumeError(f"resume={run}: {last} carries no attnflow_config (not written by "
                          f"attnflow-train)")
    cfg, saved = _upgrade(cfg), _upgrade(saved)
    diffs = [d for d in differences(saved, cfg) if not _is_safe(d[0])]
    if diffs:
        models = [d for d in diffs if d[0].split(".")[0] in STATE_DEFINING]
        what = "another model, data or task" if models else "another config"
        raise ResumeError(f"resume={run}: {last} is a checkpoint of {what} than {cfg_file}: "
                          f"{_listing(models or diffs, 'checkpoint', 'config.yaml')}")
    return saved, ckpt


def _finished(run: Path, ckpt: Dict[str, Any]) -> bool:
    """Whether the run ended normally after the state in ``last.ckpt`` (its metrics.json came
    later): there is nothing to continue unless the run is extended."""
    metrics = run / "metrics.json"
    if not metrics.is_file():
        return False
    try:
        return json.loads(metrics.read_text()).get("global_step") == ckpt.get("global_step")
    except (OSError, ValueError):
        return False


def _refuse_unsafe(keys: Iterable[str], run: Path) -> None:
    bad = [k for k in keys if not _is_safe(k)]
    if bad:
        allowed = ", ".join(sorted(SAFE))
        raise ResumeError(
            f"resume={run}: {', '.join(repr(k) for k in bad)} would change the resumed run (a "
            f"resumed run keeps its own config: {run / 'config.yaml'}). Allowed with resume: "
            f"{allowed}. To train a changed config, start a new run (ckpt_path=… takes a "
            f"checkpoint's state into a new run of the same model, data and task)")


def _check_precision(old: Any, new: Any, run: Path) -> None:
    """A resume's change of ``trainer.precision``: only among :data:`FLOAT32_WEIGHTS`."""
    if str(old) != str(new) and not {str(old), str(new)} <= set(FLOAT32_WEIGHTS):
        raise ResumeError(f"resume={run}: trainer.precision={new} would change the dtype of the "
                          f"weights the run trained with (trainer.precision={old}); a resume may "
                          f"move only among {', '.join(FLOAT32_WEIGHTS)} (float32 weights). To train "
                          f"in another, start a new run")


# Allowed keys whose new value is checked too: key -> check(old, new, run), raising ResumeError.
VALUE_CHECKS = {"trainer.precision": _check_precision}


def _check_values(changes: Iterable[Tuple[str, Any, Any]], run: Path) -> None:
    """:data:`VALUE_CHECKS` on ``(dotted key, old value, new value)`` changes."""
    for key, old, new in changes:
        if key in VALUE_CHECKS:
            VALUE_CHECKS[key](old, new, run)


def _check_length(saved: Dict[str, Any], changes: Iterable[Tuple[str, Any, Any]], ckpt: Dict[str, Any],
                  run: Path, finished: bool = False, label: Optional[str] = None) -> None:
    """A resume must leave something to train: ``trainer.max_epochs`` and ``max_steps`` (the new
    values, else the run's ``saved`` ones) beyond what the checkpoint reached. Else it would train
    nothing and only rewrite the run's metrics (and ``max_epochs=0`` is refused by Lightning only
    after the resume is recorded). Nor may it end before its next validation
    (:func:`next_validation`): the epochs it adds would be trained unvalidated, as a new run's
    with ``check_val_every_n_epoch`` beyond ``max_epochs`` (refused by :mod:`attnflow.training.run`).
    Checked when this resume sets one of them, or sets any length (:data:`EXTEND`, e.g. only
    ``trainer.max_time``) of a ``finished`` run (:func:`_finished`): its own limits must then leave
    something to train (resumed with a larger ``max_time``, a run its ``max_time`` stopped trains
    on; one that reached its ``max_steps`` trained nothing and rewrote its metrics.json). Without,
    a run killed after its last epoch but before its evaluation resumes to finish that.
    ``label``: the override named in the messages (``ckpt_path=<file>``: a new run started from a
    checkpoint's state is checked alike, with its own limits; default ``resume=<run>``)."""
    who = label or f"resume={run}"
    changes = list(changes)
    typed = {k for k, _, _ in changes}
    if not typed & {"trainer.max_epochs", "trainer.max_steps"} and not (finished and typed & set(EXTEND)):
        return
    fit = (ckpt.get("loops") or {}).get("fit_loop") or {}
    loop = fit.get("epoch_progress") or {}
    current = loop.get("current") or {}
    epochs = current.get("processed", ckpt.get("epoch"))  # epochs whose batches all ran, with one
    # whose last batch ran that Lightning had not counted yet (a checkpoint saved at the end of
    # validation, as with check_val_every_n_epoch > 1: a 2-epoch run's says 1 processed)
    if (isinstance(epochs, int) and current.get("started") == epochs + 1
            and (fit.get("epoch_loop.batch_progress") or {}).get("is_last_batch")):
        epochs += 1
    reached = {"trainer.max_epochs": (epochs, "epoch(s)"), "trainer.max_steps": (ckpt.get("global_step"), "steps")}
    limits = {key: saved.get(key) for key in reached}
    limits.update({k: new for k, _, new in changes if k in reached})
    numbers = {}  # the limits that are numbers (null, or not a number: the trainer field checks name it)
    for key, limit in limits.items():
        with contextlib.suppress(TypeError, ValueError):
            numbers[key] = int(limit)
    for key, value in numbers.items():
        done, unit = reached[key]
        if value != -1 and isinstance(done, int) and value <= done:
            own = "" if key in typed else " (the run's own limit)"
            had = (f"the checkpoint was saved after {done} {unit}," if label else
                   f"the run has trained {done} {unit} already")
            raise ResumeError(f"{who}: {had} and {key}={value}{own}, so nothing would be trained; "
                              f"give {key} more than {done} (or -1: no limit)")
    # a new run that never validates is refused (attnflow.training.run); a resume that adds none alike
    trainer = {k.split(".", 1)[1]: v for k, v in saved.items() if k.startswith("trainer.")}
    trainer["max_epochs"] = numbers.get("trainer.max_epochs", limits["trainer.max_epochs"])
    first = next_validation(trainer, epochs)
    if first is not None:
        raise ResumeError(f"{who}: the run validates every {trainer['check_val_every_n_epoch']} "
                          f"epochs (trainer.check_val_every_n_epoch) and has trained {epochs} "
                          f"epoch(s); trainer.max_epochs={trainer['max_epochs']} ends it before epoch "
                          f"{first}, so none of the epochs it adds would be validated (no checkpoint "
                          f"chosen among them, no early stopping); give trainer.max_epochs={first} or "
                          f"more (or -1: no limit)")
    _check_epoch_end_under_steps(limits, loop, ckpt, who)


def next_validation(trainer: Dict[str, Any], done: Any = 0) -> Optional[int]:
    """The first epoch that training on from ``done`` finished epochs validates after, where that
    is beyond ``trainer.max_epochs`` — none of the epochs trained is validated (Lightning validates
    after epoch k where k % ``check_val_every_n_epoch`` == 0) — else None: some epoch is, validation
    is off (``limit_val_batches=0``), runs every epoch (``fast_dev_run``) or counts steps
    (``check_val_every_n_epoch=null``), or the run is not limited by a number of epochs."""
    every, epochs = trainer.get("check_val_every_n_epoch"), trainer.get("max_epochs")
    if (trainer.get("fast_dev_run") or trainer.get("limit_val_batches") == 0
            or not all(isinstance(v, int) and not isinstance(v, bool) for v in (every, epochs, done))
            or every < 1 or epochs < 1):
        return None
    first = (done // every + 1) * every
    return first if first > epochs else None


def _check_epoch_end_under_steps(limits: Dict[str, Any], loop: Dict[str, Any], ckpt: Dict[str, Any],
                                 who: str) -> None:
    """Lightning 2.6 counts the epoch a checkpoint was saved at the end of twice when the resumed
    run is step-based (``max_steps`` set): its fit loop completes that epoch only for epoch-based
    training, so ``max_epochs`` ends the resumed run an epoch early — with one epoch more to go,
    nothing was trained and the run exited 0. Refused where that lost epoch makes ``max_epochs``
    end the run before ``max_steps`` (where ``max_steps`` still ends it first, the run is right)."""
    total = loop.get("total") or {}
    done, step = total.get("processed"), ckpt.get("global_step")
    at_epoch_end = (isinstance(done, int) and done > 0 and isinstance(step, int)
                    and total.get("ready") == total.get("started") == done
                    and total.get("completed") == done - 1)
    try:
        epochs, steps = int(limits["trainer.max_epochs"]), int(limits["trainer.max_steps"])
    except (TypeError, ValueError):
        return
    if not at_epoch_end or steps == -1 or epochs == -1:
        return
    if (epochs - done - 1) * step / done < steps - step:  # less one epoch, max_epochs ends it first
        raise ResumeError(
            f"{who}: its checkpoint was saved at the end of epoch {done}, and resumed under "
            f"trainer.max_steps={steps} with trainer.max_epochs={epochs}, Lightning would stop it "
            f"an epoch early, before max_steps (it counts that epoch twice in a step-based run). "
            f"Let one limit end it: trainer.max_epochs=-1 (max_steps ends it), or "
            f"trainer.max_steps=-1 (max_epochs ends it)")


def check_resumable(run: Path, keys: Sequence[str],
                    values: Optional[Dict[str, Any]] = None) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """All checks of ``resume=<run>`` with overrides of ``keys`` (``values``: their new values, for
    :data:`VALUE_CHECKS`): (run config, checkpoint)."""
    _refuse_unsafe(keys, run)
    cfg, ckpt = check_run(run)
    flat = _flatten(cfg)
    _check_values([(k, flat.get(k), v) for k, v in (values or {}).items()], run)
    finished = _finished(run, ckpt)
    if finished and not any(k in EXTEND for k in keys):
        trainer = cfg.get("trainer") or {}
        raise ResumeError(
            f"resume={run}: the run already finished (trainer.max_epochs={trainer.get('max_epochs')}, "
            f"trainer.max_steps={trainer.get('max_steps')}; {ckpt.get('global_step')} steps; "
            f"metrics.json written). To train it further, extend it: resume={run} "
            f"trainer.max_epochs=<more>")
    _check_length(flat, [(k, flat.get(k), v) for k, v in (values or {}).items()], ckpt, run, finished)
    return cfg, ckpt


# -- the command line (before Hydra) -----------------------------------------------------------------
def _parse(item: str) -> Tuple[str, str]:
    """(key, value) of a ``key=value`` override, the value unquoted as Hydra reads it."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        ov = OverridesParser.create().parse_overrides([item])[0]
    except Exception as err:  # noqa: BLE001  (Hydra's grammar errors)
        raise ResumeError(f"cannot read the override {item!r}: {str(err).splitlines()[0]}") from None
    value = ov.value() if not ov.is_delete() else None
    return ov.get_key_element().split("@", 1)[0], "" if value is None else str(value)


def prepare_argv(args: Sequence[str]) -> List[str]:
    """The Hydra command line for ``resume=…`` among ``args``: every check first (raising
    :class:`ResumeError`), then ``resume=<run dir>``, the allowed overrides, and the run's own
    directory with no new ``.hydra/`` (``hydra.run.dir=<run> hydra.output_subdir=null``).
    ``args`` without ``resume=`` (or with ``resume=null``, the default: a new run) come back
    unchanged."""
    overrides = [a for a in args if "=" in a and not a.startswith("-")]
    parsed = [(a, *_parse(a)) for a in overrides]
    values = {k: v for _, k, v in parsed}
    target = values.get("resume")
    if not target:  # as from_hydra: no resume= or an empty one (null) is a new run
        pinned = values.get("hydra.run.dir")
        held = recorded_work(Path(pinned).expanduser()) if pinned and _rank_zero() else None
        if held:  # Hydra would rewrite its .hydra/ and train() the config.yaml (DDP ranks > 0
            # repeat the pinned directory of their rank 0: they pass)
            way = (f"Continue it with resume={pinned}, or give" if held == RUN_RECORD else "Give")
            raise ResumeError(f"hydra.run.dir={pinned} already holds {held}; a new run there would "
                              f"overwrite its record. {way} the new run another directory")
        return list(args)
    flags = [a for a in args if a not in overrides]
    if any(f in ("-m", "--multirun") or f.startswith(("--config", "-cp", "-cn", "-cd")) for f in flags):
        raise ResumeError("resume= continues one run in its own directory and its own config: it "
                          "takes neither -m/--multirun nor --config-path/--config-name")
    experiment = values.get("experiment") or None
    run = (find_last(output_root(values), experiment) if target == "last"
           else Path(target).expanduser().resolve())
    keep, keys = [], []
    for item, key, value in parsed:
        if key in ("resume", "experiment", "hydra.output_subdir"):
            continue
        if key == "hydra.run.dir":  # a relaunch (DDP ranks) repeats it: it must be the run's own
            if Path(value).expanduser().resolve() != run:
                raise ResumeError(f"resume={run} continues in the run's own directory; "
                                  f"hydra.run.dir={value} names another")
            continue
        if not (key.startswith("hydra.") or key.startswith("hydra/")):
            keys.append(key)
        keep.append(item)
    _, ckpt = check_resumable(run, keys, {k: values[k] for k in keys})
    recorded = run_experiment(run)
    if experiment is not None and experiment != recorded:
        raise ResumeError(f"resume={run}: the run is experiment '{recorded or 'default'}', the "
                          f"command line names experiment={experiment}. Leave experiment= out (a "
                          f"resumed run uses its own config) or name a run of {experiment}")
    print(f"attnflow: resuming {run} (experiment {recorded or 'default'}) from "
          f"checkpoints/last.ckpt: epoch {ckpt.get('epoch')}, step {ckpt.get('global_step')}",
          file=sys.stderr, flush=True)
    return [*flags, f"resume={_quote(str(run))}", *keep, f"hydra.run.dir={_quote(str(run))}",
            "hydra.output_subdir=null"]


_TYPED: Optional[List[str]] = None  # the command line as typed, for the resume record


# The environment variables conf/paths reads (``${oc.env:…}``), with the field each one sets.
PATH_VARIABLES = {"ATTNFLOW_OUTPUT_DIR": "paths.output_root", "ATTNFLOW_DATA_DIR": "paths.data_dir"}


def _check_path_variables(values: Dict[str, str]) -> None:
    """A path variable that is set but empty (``ATTNFLOW_OUTPUT_DIR=``) is read by ``oc.env`` as
    the empty path, not as unset: runs were written at the file system's root (``/<date>/<time>``)
    and data read from the current folder. Refused where its field is not on the command line."""
    for var, field in PATH_VARIABLES.items():
        if var in os.environ and not os.environ[var].strip() and not values.get(field):
            raise ResumeError(f"${var} is set but empty ({os.environ[var]!r}), which would read as "
                              f"the file system's root or the current folder: set it to a folder, "
                              f"unset it (unset {var}: the default), or give {field}=…")


def _check_job_chdir(values: Dict[str, str], args: Sequence[str]) -> None:
    """``hydra.job.chdir=true`` runs the job inside its run directory. attnflow writes there by
    full paths in any case, so the one thing it changed was where relative paths are read from:
    ``ckpt_path=<run>/checkpoints/last.ckpt`` typed relative to the current folder was refused as
    a checkpoint that does not exist, a relative data path (or ``$ATTNFLOW_DATA_DIR``) as a
    missing data file. Refused before Hydra starts, as an override that does nothing else."""
    value = values.get("hydra.job.chdir")
    if value is not None and value.strip().lower() in ("true", "yes", "on", "y", "1"):
        typed = [a.lstrip("+") for a in args if a.lstrip("+").split("=", 1)[0] == "hydra.job.chdir"]
        shown = typed[-1] if typed else "hydra.job.chdir=true"
        raise ResumeError(f"{shown} would run the job inside its run directory: attnflow writes "
                          f"every file there by its full path already, so the only change would be "
                          f"that relative paths (ckpt_path=, model.init_from=, data files, "
                          f"$ATTNFLOW_DATA_DIR) are read from inside the new run directory, where "
                          f"they are not; drop it (hydra.run.dir= names the run directory)")


def _check_mode_folders(args: Sequence[str]) -> None:
    """A run folder the run's mode does not read: Hydra writes a single run to ``hydra.run.dir``
    and a multirun's jobs under ``hydra.sweep.dir``/``hydra.sweep.subdir``, each ignoring the
    other's. ``hydra.sweep.dir=…`` with ``-m`` forgotten put the run in ``outputs/<date>/<time>``,
    and ``-m … hydra.run.dir=…`` the jobs in the default sweep folder: the folder typed was not
    used, without a word. So was ``paths.output_root`` beside the mode's folder typed (unless that
    folder is built from it). Refused before Hydra starts, naming the override as typed."""
    from attnflow import config_dir
    from attnflow.config.sweeps import chooses_multirun_file

    typed = {a.lstrip("+").split("=", 1)[0]: a.lstrip("+") for a in args
             if "=" in a and not a.startswith(("-", "~"))}
    if "resume" in typed or not _rank_zero():  # a resume's hydra.run.dir is set by prepare_argv,
        return  # a DDP rank's by Lightning's relaunch (rank 0's folder): checked in rank 0
    multirun = (bool({"-m", "--multirun"} & set(args))
                or typed.get("hydra.mode", "").split("=", 1)[-1].strip().upper() == "MULTIRUN")
    unread = ["hydra.run.dir"] if multirun else ["hydra.sweep.dir", "hydra.sweep.subdir"]
    found = [typed[k] for k in unread if k in typed]
    if found and not multirun and chooses_multirun_file(args, config_dir()):
        return  # a config file chosen on the command line makes this a multirun by itself
    if found and multirun:
        raise ResumeError(f"{found[0]} is where a single run is written, and this is a multirun "
                          f"(-m), whose jobs go under hydra.sweep.dir/hydra.sweep.subdir; give "
                          f"hydra.sweep.dir=… instead, or drop -m for a single run")
    if found:
        raise ResumeError(f"{found[0]} is where a multirun (-m) writes its jobs, and this is a "
                          f"single run, written to hydra.run.dir; give hydra.run.dir=… instead, or "
                          f"add -m (and values to sweep) for a multirun")
    # the root of run folders, where the mode's folder is typed without it
    folder = "hydra.sweep.dir" if multirun else "hydra.run.dir"
    if ("paths.output_root" in typed and folder in typed
            and "paths.output_root" not in typed[folder].split("=", 1)[1]):
        what = "the sweep's folder" if multirun else "the run's folder"
        raise ResumeError(f"{typed['paths.output_root']} (at 'paths.output_root') does nothing: "
                          f"{typed[folder]} names {what} itself, and paths.output_root is only the "
                          f"root the default folders are made under; drop one of them")


def check_output_folders(args: Sequence[str]) -> None:
    """Where the run or sweep of ``args`` would be written (``hydra.run.dir``, ``hydra.sweep.dir``,
    ``paths.output_root`` or ``$ATTNFLOW_OUTPUT_DIR``) must be a folder or not exist yet; a path
    under a file is a :class:`ResumeError` naming both (Hydra would fail with a traceback). An
    empty ``$ATTNFLOW_OUTPUT_DIR`` or ``$ATTNFLOW_DATA_DIR`` is refused (:func:`_check_path_variables`),
    and so are ``hydra.job.chdir=true`` (:func:`_check_job_chdir`) and a run folder the run's mode
    does not read (:func:`_check_mode_folders`)."""
    values = {k.lstrip("+"): v for k, v in (_parse(a) for a in args if "=" in a and not a.startswith("-"))}
    _check_path_variables(values)
    _check_job_chdir(values, args)
    where = {key: values[key] for key in ("hydra.run.dir", "hydra.sweep.dir") if values.get(key)}
    env = not values.get("paths.output_root") and os.environ.get("ATTNFLOW_OUTPUT_DIR")
    source = "$ATTNFLOW_OUTPUT_DIR" if env else "paths.output_root"
    where[source] = str(output_root(values))
    for key, path in where.items():
        folder = Path(path).expanduser()
        while not folder.exists() and folder != folder.parent:
            folder = folder.parent
        if not folder.is_dir():
            raise ResumeError(f"{key}={path}: {folder} is a file, so runs cannot be written there; "
                              f"name a folder")
    _check_mode_folders(args)


def cli_args(args: Sequence[str]) -> List[str]:
    """:func:`prepare_argv` for the console script: a refused resume prints why and exits 2."""
    global _TYPED
    _TYPED = ["attnflow-train", *args]
    try:
        return prepare_argv(args)
    except ResumeError as err:
        print(f"attnflow: {err}", file=sys.stderr)
        sys.exit(2)


# -- the config of the resumed run -------------------------------------------------------------------
def _plain(value: Any) -> Any:
    from omegaconf import Container, OmegaConf

    return OmegaConf.to_container(value, resolve=True) if isinstance(value, Container) else value


def resume_config(run_dir: Path | str, overrides: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """The resolved config that continues ``run_dir``: its checkpoint's config, with the allowed
    ``overrides`` ({dotted key: value}) applied, ``resume`` set to the run and the W&B run id of
    the checkpoint set on a ``wandb`` logger. Raises :class:`ResumeError`."""
    run = Path(run_dir).expanduser().resolve()
    overrides = dict(overrides or {})
    cfg, ckpt = check_resumable(run, list(overrides), overrides)
    for key, value in overrides.items():
        if not key.startswith("paths."):
            _set(cfg, key, _plain(value))
    cfg["resume"], cfg["ckpt_path"] = str(run), None
    from attnflow.training.state import WANDB_ID_KEY

    run_id = ckpt.get(WANDB_ID_KEY)
    logger = cfg.get("logger")
    if run_id and isinstance(logger, dict) and isinstance(logger.get("wandb"), dict):
        logger["wandb"]["run_id"] = logger["wandb"].get("run_id") or run_id
    return cfg


def from_hydra(cfg: Any, typed: Optional[Sequence[str]] = None) -> Any:
    """For ``run_app``: the composed ``cfg`` itself, or with ``resume=`` set, the resumed run's
    config with the allowed overrides typed on the command line (their values as Hydra parsed
    them). ``typed``: those overrides where no Hydra app runs (``attnflow-blocks --config``);
    else Hydra's record of them."""
    target = cfg.get("resume") if hasattr(cfg, "get") else None
    if not target:
        return cfg
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf

    if typed is None:
        typed = HydraConfig.get().overrides.task if HydraConfig.initialized() else ()
    values: Dict[str, Any] = {}
    for item in typed:
        key = item.lstrip("+~").split("=", 1)[0].split("@", 1)[0]
        if key not in ("resume", "experiment") and not key.startswith("hydra"):
            values[key] = OmegaConf.select(cfg, key)
    return resume_config(target, values)


# -- the start of a run (attnflow.training.run.train) ----------------------------------------------------------
def _dump(data: Any) -> str:
    from omegaconf import OmegaConf

    return OmegaConf.to_yaml(OmegaConf.create(data))


RUN_RECORD = "a run (config.yaml)"


def recorded_work(folder: Path) -> Optional[str]:
    """What ``folder`` already holds that a new run or sweep there would overwrite, in words: a
    run (its ``config.yaml``), a sweep (``multirun.yaml``, an Optuna ``optuna.db``) or the runs of
    one (``<job>/config.yaml``); None for a folder that is new or holds none of these."""
    if not folder.is_dir():
        return None
    if (folder / "config.yaml").is_file():
        return RUN_RECORD
    for name in ("multirun.yaml", "optuna.db"):
        if (folder / name).is_file():
            return f"a sweep ({name})"
    jobs = sorted(p.parent.name for p in folder.glob("*/config.yaml"))
    if jobs:
        return f"the runs of a sweep ({len(jobs)} job folder(s) with config.yaml: {', '.join(jobs[:5])})"
    return None


def _rank_zero() -> bool:
    """Whether this process is the first of a distributed job (Lightning sets these variables
    for the processes it launches; SLURM and torchrun for theirs)."""
    return all(os.environ.get(v, "0") == "0" for v in ("RANK", "LOCAL_RANK", "SLURM_PROCID"))


def start(resolved: Dict[str, Any], run_dir: Path | str) -> Optional[str]:
    """Before any work of :func:`attnflow.training.run.train`: the checkpoint to fit from, after checking
    it, and the run's record — ``config.yaml`` for a new run; for a resumed one ``config.yaml``
    is kept and ``resume-<n>.yaml`` records what this resume changed."""
    from attnflow.io.checkpoints import CheckpointError
    from attnflow.training.state import WANDB_ID_KEY, load_checkpoint_file

    run_dir = Path(run_dir)
    target = resolved.get("resume")
    if target:
        run = Path(target).expanduser().resolve()
        if run != run_dir.resolve():
            raise ResumeError(f"resume={run} continues the run in its own directory, but this run "
                              f"writes to {run_dir}")
        saved, ckpt = check_run(run)
        diffs = differences(saved, resolved)
        _refuse_unsafe([k for k, _, _ in diffs], run)
        _check_values(diffs, run)
        _check_length(_flatten(saved), diffs, ckpt, run, _finished(run, ckpt))
        n = 1 + len(list(run.glob("resume-*.yaml")))
        record = {"resumed_at": time.strftime("%Y-%m-%d %H:%M:%S"), "command": " ".join(_TYPED or sys.argv),
                  "from": {"checkpoint": str(run / "checkpoints" / "last.ckpt"),
                           "epoch": ckpt.get("epoch"), "global_step": ckpt.get("global_step")},
                  "changed": {k: {"from": a, "to": b} for k, a, b in diffs},
                  "wandb_run_id": ckpt.get(WANDB_ID_KEY)}
        metrics = run / "metrics.json"
        if metrics.is_file():  # the earlier result, which this resume's end will replace
            try:
                record["previous_metrics"] = json.loads(metrics.read_text()).get("metrics")
            except (OSError, ValueError, AttributeError):  # unreadable: kept on disk as it is
                record["previous_metrics"] = f"unreadable: {metrics}"
        if _rank_zero():  # DDP ranks re-run this: one record
            (run / f"resume-{n}.yaml").write_text(_dump(record))
        return str(run / "checkpoints" / "last.ckpt")
    ckpt_path = resolved.get("ckpt_path")
    if ckpt_path:
        path = Path(ckpt_path).expanduser()
        if path.resolve().parent.parent == run_dir.resolve():
            raise ResumeError(f"ckpt_path={ckpt_path} is a checkpoint of this run's own directory, "
                              f"whose config.yaml a new run would replace; continue it in place "
                              f"with resume={run_dir}")
        try:
            ckpt = load_checkpoint_file(path, mmap=True)
        except CheckpointError as err:
            raise ResumeError(f"ckpt_path: {err}") from None
        if "pytorch-lightning_version" not in ckpt or "state_dict" not in ckpt:  # Lightning's keys
            raise ResumeError(f"ckpt_path={ckpt_path} holds weights only (keys: "
                              f"{', '.join(sorted(map(str, ckpt))[:6])}), not a training state "
                              f"Lightning can continue (e.g. a snapshot of callbacks.average, "
                              f"checkpoints/avg/epoch<k>.pt); fit from a run's checkpoints/*.ckpt")
        saved = ckpt.get("attnflow_config")
        if isinstance(saved, dict):
            diffs = differences(_upgrade(saved), resolved, only=STATE_DEFINING)
            if diffs:
                raise ResumeError(
                    f"ckpt_path={ckpt_path} is a checkpoint of another model, data or task than "
                    f"this run's config: {_listing(diffs, 'checkpoint', 'this run')}. Its weights "
                    f"and optimiser state fit only its own config")
        # the new run's limits must leave something to train after the checkpoint's state
        flat = _flatten(resolved)
        limits = [(k, None, flat.get(k)) for k in ("trainer.max_epochs", "trainer.max_steps")]
        _check_length(flat, limits, ckpt, run_dir, label=f"ckpt_path={ckpt_path}")
    if _rank_zero() and (run_dir / "config.yaml").is_file():  # e.g. a sweep job's folder, reused
        raise ResumeError(f"{run_dir} already holds a run (config.yaml); a new run there would "
                          f"overwrite its record, metrics and checkpoints. Continue it with "
                          f"resume={run_dir}, or give the new run another directory")
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.yaml").write_text(_dump(resolved))
    return str(ckpt_path) if ckpt_path else None
