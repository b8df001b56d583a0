"""Continuing a stopped run in its own directory: ``attnflow-train resume=<run dir>`` (or
``resume=last``: the newest run of the experiment under the output root).

A resumed run is its checkpoint's config (``attnflow_config`` of ``checkpoints/last.ckpt``),
changed only by the overrides of :data:`SAFE` (length, device, precision, records), and continues
with its optimiser, scheduler, random streams, loader position and W&B run id
(:mod:`attnflow.training.state`). It is checked before Hydra starts (a refused resume changes
nothing); ``config.yaml`` is kept, no new ``.hydra/`` is written, and what a resume changed is
recorded in ``resume-<n>.yaml``. ``ckpt_path=<file>`` starts a *new* run from a checkpoint's
training state; its model, data and task must equal the checkpoint's.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

import yaml
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from omegaconf import OmegaConf

from attnflow.config.registry import ConfigError

# attnflow.io.checkpoints and .state (torch) are imported where a checkpoint is read: not before.

# Overrides that may come with resume= (each with the fields under it).
EXTEND = ("trainer.max_epochs", "trainer.max_steps", "trainer.max_time")
# The trainer.precision values that keep float32 weights and optimiser state (mixed precision casts
# only the computation): a resume may move among them, not to or from half or double weights.
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


# -- the run to resume ------------------------------------------------------------------------------
def run_experiment(run_dir: Path) -> Optional[str]:
    """The experiment a run was composed with (None: the default): Hydra's record of the choice,
    else ``config.yaml``'s ``run.experiment``."""
    try:
        if (run_dir / ".hydra" / "hydra.yaml").is_file():
            data = yaml.safe_load((run_dir / ".hydra" / "hydra.yaml").read_text()) or {}
            exp = (((data.get("hydra") or {}).get("runtime") or {}).get("choices") or {}).get("experiment")
        else:
            data = yaml.safe_load((run_dir / "config.yaml").read_text()) or {}
            exp = (data.get("run") or {}).get("experiment")
    except (OSError, yaml.YAMLError):
        return None
    return None if exp in (None, "default") else str(exp)


def output_root(overrides: Dict[str, str]) -> Path:
    """Where runs are written: ``paths.output_root=``, else ``$ATTNFLOW_OUTPUT_DIR``, else outputs."""
    return Path(overrides.get("paths.output_root") or os.environ.get("ATTNFLOW_OUTPUT_DIR") or "outputs")


def find_last(root: Path, experiment: Optional[str]) -> Path:
    """The run of ``experiment`` under ``root`` whose ``last.ckpt`` was written last."""
    runs = sorted((p for p in root.rglob("last.ckpt") if p.parent.name == "checkpoints"),
                  key=lambda p: p.stat().st_mtime, reverse=True)
    for last in runs:
        if run_experiment(last.parent.parent) == experiment:
            return last.parent.parent.resolve()
    raise ResumeError(f"resume=last: no run of experiment '{experiment or 'default'}' with "
                      f"checkpoints/last.ckpt under {root}. Name the experiment (experiment=NAME "
                      f"resume=last) or the run (resume=<run dir>)")


def check_run(run_dir: Path | str) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """(the config the run's ``last.ckpt`` was trained with, that checkpoint), or a
    :class:`ResumeError` saying what is wrong."""
    run = Path(run_dir)
    last = run / "checkpoints" / "last.ckpt"
    if not (run / "config.yaml").is_file():
        raise ResumeError(f"resume={run}: not an attnflow run directory (no config.yaml; a run "
                          f"directory of attnflow-train holds config.yaml and checkpoints/)")
    if not last.is_file():
        others = sorted(p.name for p in (run / "checkpoints").glob("*.ckpt"))
        hint = (f". Its checkpoints: {', '.join(others)}; to start a new run from one of them: "
                f"ckpt_path={run / 'checkpoints' / others[0]}" if others else ": nothing to continue")
        raise ResumeError(f"resume={run}: the run has no checkpoints/last.ckpt{hint}")
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
    return saved, ckpt


def _finished(run: Path, ckpt: Dict[str, Any]) -> bool:
    """Whether the run ended normally after the state in ``last.ckpt`` (its ``metrics.json`` came
    later): there is nothing to continue unless the run is extended."""
    try:
        return json.loads((run / "metrics.json").read_text()).get("global_step") == ckpt.get("global_step")
    except (OSError, ValueError, AttributeError):
        return False


def _refuse_unsafe(keys: Iterable[str], run: Path) -> None:
    bad = [k for k in keys if not _is_safe(k)]
    if bad:
        raise ResumeError(
            f"resume={run}: {', '.join(repr(k) for k in bad)} would change the resumed run (a "
            f"resumed run keeps its own config: {run / 'config.yaml'}). Allowed with resume: "
            f"{', '.join(sorted(SAFE))}. To train a changed config, start a new run (ckpt_path=… "
            f"takes a checkpoint's state into a new run of the same model, data and task)")


def _check_precision(old: Any, new: Any, run: Path) -> None:
    """A resume's change of ``trainer.precision``: only among :data:`FLOAT32_WEIGHTS`."""
    if str(old) != str(new) and not {str(old), str(new)} <= set(FLOAT32_WEIGHTS):
        raise ResumeError(f"resume={run}: trainer.precision={new} would change the dtype of the "
                          f"weights the run trained with (trainer.precision={old}); a resume may "
                          f"move only among {', '.join(FLOAT32_WEIGHTS)} (float32 weights). To train "
                          f"in another, start a new run")


def _check_length(limits: Dict[str, Any], typed: Iterable[str], epochs: Any, steps: Any,
                  who: str, label: Optional[str] = None) -> None:
    """``trainer.max_epochs`` and ``max_steps`` (``limits``; -1: none) must leave something to
    train beyond the ``epochs`` and ``steps`` a checkpoint reached, else the run would train
    nothing and only rewrite its metrics. ``typed``: the limits set on the command line;
    ``label``: the checkpoint of a new run (``ckpt_path=``), else the run is resumed."""
    for key, done, unit in (("trainer.max_epochs", epochs, "epoch(s)"),
                            ("trainer.max_steps", steps, "steps")):
        try:
            value = int(limits.get(key))
        except (TypeError, ValueError):
            continue
        if value != -1 and isinstance(done, int) and value <= done:
            own = "" if key in typed else " (the run's own limit)"
            had = (f"the checkpoint was saved after {done} {unit}," if label else
                   f"the run has trained {done} {unit} already")
            raise ResumeError(f"{who}: {had} and {key}={value}{own}, so nothing would be trained; "
                              f"give {key} more than {done} (or -1: no limit)")


def _check_epoch_end_under_steps(limits: Dict[str, Any], ckpt: Dict[str, Any], who: str) -> None:
    """Lightning 2.6 counts the epoch a checkpoint was saved at the end of twice when the resumed
    run is step-based (``max_steps`` set), so ``max_epochs`` ends it an epoch early; refused where
    that makes ``max_epochs`` end it before ``max_steps``. Only the fit loop's progress counters
    tell a checkpoint saved at an epoch's end (no public API says it)."""
    loop = ((ckpt.get("loops") or {}).get("fit_loop") or {}).get("epoch_progress") or {}
    total, step = loop.get("total") or {}, ckpt.get("global_step")
    done = total.get("processed")
    try:
        epochs, steps = int(limits["trainer.max_epochs"]), int(limits["trainer.max_steps"])
    except (KeyError, TypeError, ValueError):
        return
    at_end = (isinstance(done, int) and done > 0 and isinstance(step, int)
              and total.get("started") == done and total.get("completed") == done - 1)
    if at_end and -1 not in (epochs, steps) and (epochs - done - 1) * step / done < steps - step:
        raise ResumeError(f"{who}: its checkpoint was saved at the end of epoch {done}, and resumed "
                          f"under trainer.max_steps={steps} with trainer.max_epochs={epochs}, "
                          f"Lightning would stop it an epoch early, before max_steps. Let one limit "
                          f"end it: trainer.max_epochs=-1 (max_steps ends it), or "
                          f"trainer.max_steps=-1 (max_epochs ends it)")


def next_validation(trainer: Dict[str, Any], done: Any = 0) -> Optional[int]:
    """The first epoch that training on from ``done`` finished epochs validates after (Lightning
    validates after epoch k where k % ``check_val_every_n_epoch`` == 0), where that is beyond
    ``trainer.max_epochs`` (no epoch trained is validated); else None."""
    every, epochs = trainer.get("check_val_every_n_epoch"), trainer.get("max_epochs")
    if (trainer.get("fast_dev_run") or trainer.get("limit_val_batches") == 0
            or not all(isinstance(v, int) and not isinstance(v, bool) for v in (every, epochs, done))
            or every < 1 or epochs < 1):
        return None
    first = (done // every + 1) * every
    return first if first > epochs else None


def check_resumable(run: Path, values: Dict[str, Any]) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """Every check of ``resume=<run>`` with the overrides ``values`` ({dotted key: new value}):
    (the run's config, its checkpoint)."""
    _refuse_unsafe(values, run)
    cfg, ckpt = check_run(run)
    flat = _flatten(cfg)
    if "trainer.precision" in values:
        _check_precision(flat.get("trainer.precision"), values["trainer.precision"], run)
    finished = _finished(run, ckpt)
    if finished and not set(values) & set(EXTEND):
        raise ResumeError(
            f"resume={run}: the run already finished (trainer.max_epochs={flat.get('trainer.max_epochs')}, "
            f"trainer.max_steps={flat.get('trainer.max_steps')}; {ckpt.get('global_step')} steps; "
            f"metrics.json written). To train it further, extend it: resume={run} "
            f"trainer.max_epochs=<more>")
    if finished or set(values) & {"trainer.max_epochs", "trainer.max_steps"}:
        # the checkpoint's epoch: the epochs finished before the one it was saved in (at least)
        _check_length({**flat, **values}, values, ckpt.get("epoch"), ckpt.get("global_step"),
                      f"resume={run}")
        _check_epoch_end_under_steps({**flat, **values}, ckpt, f"resume={run}")
    return cfg, ckpt


# -- the command line (before Hydra) -----------------------------------------------------------------
def _parse(item: str) -> Tuple[str, str]:
    """(key, value) of a ``key=value`` override, the value unquoted as Hydra reads it."""
    try:
        ov = OverridesParser.create().parse_overrides([item])[0]
    except HydraException as err:
        raise ResumeError(f"cannot read the override {item!r}: {str(err).splitlines()[0]}") from None
    value = ov.value() if not ov.is_delete() else None
    return ov.get_key_element().split("@", 1)[0], "" if value is None else str(value)


def _quote(value: str) -> str:
    """A Hydra override value: plain when it is a plain path, else single-quoted."""
    plain = re.fullmatch(r"[\w./-]+", value)
    return value if plain else "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _rank_zero() -> bool:
    """Whether this process is the first of a distributed job (as Lightning, SLURM, torchrun say)."""
    return all(os.environ.get(v, "0") == "0" for v in ("RANK", "LOCAL_RANK", "SLURM_PROCID"))


def prepare_argv(args: Sequence[str]) -> List[str]:
    """The Hydra command line for ``resume=…`` among ``args``: the checks first (raising
    :class:`ResumeError`), then ``resume=<run dir>``, the allowed overrides, and the run's own
    directory with no new ``.hydra/`` (``hydra.run.dir=<run> hydra.output_subdir=null``).
    Without ``resume=`` (or with ``resume=null``: a new run) ``args`` come back unchanged, unless
    their ``hydra.run.dir`` already holds a run, whose record a new run would overwrite."""
    parsed = [(a, *_parse(a)) for a in args if "=" in a and not a.startswith("-")]
    values = {k: v for _, k, v in parsed}
    target, pinned = values.get("resume"), values.get("hydra.run.dir")
    if not target:
        if pinned and _rank_zero() and (Path(pinned).expanduser() / "config.yaml").is_file():
            raise ResumeError(f"hydra.run.dir={pinned} already holds a run (config.yaml); a new run "
                              f"there would overwrite its record. Continue it with resume={pinned}, "
                              f"or give the new run another directory")
        return list(args)
    flags = [a for a in args if a.startswith("-")]
    if flags:
        raise ResumeError(f"resume= continues one run in its own directory with its own config: it "
                          f"takes no {flags[0]}")
    experiment = values.get("experiment") or None
    run = (find_last(output_root(values), experiment) if target == "last"
           else Path(target).expanduser().resolve())
    if pinned and Path(pinned).expanduser().resolve() != run:  # a DDP relaunch repeats the run's own
        raise ResumeError(f"resume={run} continues in the run's own directory; hydra.run.dir={pinned} "
                          f"names another")
    keep = [item for item, key, _ in parsed
            if key not in ("resume", "experiment", "hydra.run.dir", "hydra.output_subdir")]
    _, ckpt = check_resumable(run, {k: v for _, k, v in parsed if k not in ("resume", "experiment")
                                    and not k.startswith(("hydra.", "hydra/"))})
    recorded = run_experiment(run)
    if experiment is not None and experiment != recorded:
        raise ResumeError(f"resume={run}: the run is experiment '{recorded or 'default'}', the "
                          f"command line names experiment={experiment}. Leave experiment= out (a "
                          f"resumed run uses its own config) or name a run of {experiment}")
    print(f"attnflow: resuming {run} (experiment {recorded or 'default'}) from "
          f"checkpoints/last.ckpt: epoch {ckpt.get('epoch')}, step {ckpt.get('global_step')}",
          file=sys.stderr, flush=True)
    return [f"resume={_quote(str(run))}", *keep, f"hydra.run.dir={_quote(str(run))}",
            "hydra.output_subdir=null"]


# -- the config of the resumed run -------------------------------------------------------------------
def resume_config(run_dir: Path | str, overrides: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """The resolved config that continues ``run_dir``: its checkpoint's config, with the allowed
    ``overrides`` ({dotted key: value}) applied, ``resume`` set to the run and the W&B run id of
    the checkpoint set on a ``wandb`` logger. Raises :class:`ResumeError`."""
    from attnflow.training.state import WANDB_ID_KEY

    run = Path(run_dir).expanduser().resolve()
    overrides = dict(overrides or {})
    cfg, ckpt = check_resumable(run, overrides)
    conf = OmegaConf.create(cfg)
    for key, value in overrides.items():
        if not key.startswith("paths."):
            OmegaConf.update(conf, key, value, merge=False, force_add=True)
    cfg = OmegaConf.to_container(conf)
    cfg["resume"], cfg["ckpt_path"] = str(run), None
    run_id, logger = ckpt.get(WANDB_ID_KEY), cfg.get("logger")
    if run_id and isinstance(logger, dict) and isinstance(logger.get("wandb"), dict):
        logger["wandb"]["run_id"] = logger["wandb"].get("run_id") or run_id
    return cfg


def from_hydra(cfg: Any, typed: Optional[Sequence[str]] = None) -> Any:
    """For ``run_app``: the composed ``cfg``, or with ``resume=`` set the resumed run's config with
    the overrides typed (``typed``, else Hydra's record of them), their values as Hydra parsed them."""
    target = cfg.get("resume") if hasattr(cfg, "get") else None
    if not target:
        return cfg
    from hydra.core.hydra_config import HydraConfig

    if typed is None:
        typed = HydraConfig.get().overrides.task if HydraConfig.initialized() else ()
    values: Dict[str, Any] = {}
    for item in typed:
        key = item.lstrip("+~").split("=", 1)[0].split("@", 1)[0]
        if key not in ("resume", "experiment") and not key.startswith("hydra"):
            values[key] = OmegaConf.select(cfg, key)
    return resume_config(target, values)


# -- the start of a run (attnflow.training.run.train) -----------------------------------------------
def _dump(data: Any) -> str:
    return OmegaConf.to_yaml(OmegaConf.create(data))


def _start_resumed(resolved: Dict[str, Any], run: Path) -> str:
    """The checks of a resumed run's config against its checkpoint's, and ``resume-<n>.yaml``:
    what this resume changed. Returns the checkpoint to fit from."""
    from attnflow.training.state import WANDB_ID_KEY

    saved, ckpt = check_run(run)
    diffs = differences(saved, resolved)
    _refuse_unsafe([k for k, _, _ in diffs], run)
    record = {"resumed_at": time.strftime("%Y-%m-%d %H:%M:%S"), "command": " ".join(sys.argv),
              "from": {"checkpoint": str(run / "checkpoints" / "last.ckpt"),
                       "epoch": ckpt.get("epoch"), "global_step": ckpt.get("global_step")},
              "changed": {k: {"from": a, "to": b} for k, a, b in diffs},
              "wandb_run_id": ckpt.get(WANDB_ID_KEY)}
    try:  # the earlier result, which this resume's end will replace
        record["previous_metrics"] = json.loads((run / "metrics.json").read_text()).get("metrics")
    except (OSError, ValueError, AttributeError):
        pass
    if _rank_zero():  # DDP ranks re-run this: one record
        n = 1 + len(list(run.glob("resume-*.yaml")))
        (run / f"resume-{n}.yaml").write_text(_dump(record))
    return str(run / "checkpoints" / "last.ckpt")


def _check_fit_from(ckpt_path: str, resolved: Dict[str, Any], run_dir: Path) -> None:
    """``ckpt_path=`` of a new run: a training state of Lightning, of the same model, data and
    task, from another run's directory, with something left to train."""
    from attnflow.io.checkpoints import CheckpointError
    from attnflow.training.state import load_checkpoint_file

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
                          f"Lightning can continue; fit from a run's checkpoints/*.ckpt")
    saved = ckpt.get("attnflow_config")
    diffs = differences(saved, resolved, only=STATE_DEFINING) if isinstance(saved, dict) else []
    if diffs:
        raise ResumeError(f"ckpt_path={ckpt_path} is a checkpoint of another model, data or task "
                          f"than this run's config: {_listing(diffs, 'checkpoint', 'this run')}. "
                          f"Its weights and optimiser state fit only its own config")
    who = f"ckpt_path={ckpt_path}"
    _check_length(_flatten(resolved), EXTEND, ckpt.get("epoch"), ckpt.get("global_step"), who, who)
    _check_epoch_end_under_steps(_flatten(resolved), ckpt, who)


def start(resolved: Dict[str, Any], run_dir: Path | str) -> Optional[str]:
    """Before any work of :func:`attnflow.training.run.train`: the checkpoint to fit from, after
    checking it, and the run's record — ``config.yaml`` for a new run; a resumed one keeps its
    own and records what this resume changed in ``resume-<n>.yaml``."""
    run_dir = Path(run_dir)
    if resolved.get("resume"):
        run = Path(resolved["resume"]).expanduser().resolve()
        if run != run_dir.resolve():
            raise ResumeError(f"resume={run} continues the run in its own directory, but this run "
                              f"writes to {run_dir}")
        return _start_resumed(resolved, run)
    ckpt_path = resolved.get("ckpt_path")
    if ckpt_path:
        _check_fit_from(str(ckpt_path), resolved, run_dir)
    if _rank_zero() and (run_dir / "config.yaml").is_file():  # e.g. a sweep job's folder, reused
        raise ResumeError(f"{run_dir} already holds a run (config.yaml); a new run there would "
                          f"overwrite its record, metrics and checkpoints. Continue it with "
                          f"resume={run_dir}, or give the new run another directory")
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.yaml").write_text(_dump(resolved))
    return str(ckpt_path) if ckpt_path else None
