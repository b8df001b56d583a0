"""``attnflow-train resume=<run dir>`` (or ``resume=last``): continue a stopped run in its own
directory, with its checkpoint's config changed only by the overrides of :data:`SAFE`; what a
resume changed is recorded in ``resume-<n>.yaml``. ``ckpt_path=<file>`` starts a new run from a
checkpoint of the same model, data and task.
"""

from __future__ import annotations

import functools
import os
import sys
import time
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from hydra.core.hydra_config import HydraConfig
from hydra.errors import HydraException
from omegaconf import OmegaConf

from attnflow.config.groups import SHARED_GROUPS
from attnflow.config.overrides import parse
from attnflow.config.registry import ConfigError, Registry
from attnflow.io import checkpoints
from attnflow.io.checkpoints import (WANDB_ID_KEY, CheckpointError, final_metrics, newest_intact,
                                     run_experiment)
from attnflow.io.console import hydra_value, shell_word
from attnflow.training import runlock
from attnflow.training.lightning_internals import epoch_counts
from attnflow.training.runlock import first_rank

# (torch is imported where a checkpoint is read.) Overrides allowed with resume=, and below them:
EXTEND = ("trainer.max_epochs", "trainer.max_steps", "trainer.max_time")
SAFE = (*EXTEND, "trainer.accelerator", "trainer.precision", "trainer.enable_model_summary",
        "trainer.log_every_n_steps", "trainer.num_sanity_val_steps", "callbacks.progress_bar",
        "callbacks.lr_monitor", "callbacks.attention_maps", "logger", "tags", "test",
        "optimized_metric", "paths.output_root", "float32_matmul_precision", "trainer.compile")
# What records a run rather than defines it: never compared.
BOOKKEEPING = ("resume", "ckpt_path", "run", "tags", "logger", "paths", "hydra")
# What a checkpoint's state depends on (ckpt_path= into a new run must match these).
STATE_DEFINING = ("model", "data", "task")
# A rank other than the first leaves Hydra's record and log file to it, logging to its console.
OTHER_RANK = {"hydra.output_subdir": "null", "hydra/job_logging": "stdout"}


class ResumeError(ConfigError):
    """A run that cannot be resumed as asked."""


def _is_safe(key: str) -> bool:
    return any(key == s or key.startswith(s + ".") for s in SAFE)


def _flatten(node: Any, prefix: str = "") -> Dict[str, Any]:
    if not (isinstance(node, dict) and node):
        return {prefix[:-1]: node}
    return {k: v for key, sub in node.items() for k, v in _flatten(sub, f"{prefix}{key}.").items()}


def differences(a: Dict[str, Any], b: Dict[str, Any], only: Sequence[str] = (),
                ignore: Sequence[str] = BOOKKEEPING) -> List[Tuple[str, Any, Any]]:
    """``(dotted key, a's value, b's value)`` where two configs differ, within the sections
    ``only`` (all when empty), outside ``ignore``."""
    fa, fb, unset = _flatten(a), _flatten(b), "<unset: its default>"
    keys = [k for k in sorted(set(fa) | set(fb))
            if k.split(".", 1)[0] not in ignore and (not only or k.split(".", 1)[0] in only)]
    return [(k, fa.get(k, unset), fb.get(k, unset)) for k in keys if fa.get(k, unset) != fb.get(k, unset)]


def with_defaults(cfg: Dict[str, Any]) -> Dict[str, Any]:
    """``cfg`` with its blocks' defaults filled in (data, model, task, the shared groups), as a
    run saves them now (a run saved before that compares as a new one); a block it cannot
    check, as saved."""
    out = dict(cfg)
    kinds = Registry.kinds()
    for group in ("data", "model", "task", *SHARED_GROUPS):
        if isinstance(out.get(group), dict):
            try:
                out[group] = kinds[group].validate(out[group], group)
            except ConfigError:
                pass
    return out


def _listing(diffs: List[Tuple[str, Any, Any]], a: str, b: str, most: int = 8) -> str:
    diffs = sorted(diffs, key=lambda d: (not d[0].endswith(".name"), d[0].count("."), d[0]))
    parts = [f"{k}: {va!r} ({a}) vs {vb!r} ({b})" for k, va, vb in diffs[:most]]
    more = f"; and {len(diffs) - most} more" if len(diffs) > most else ""
    return "; ".join(parts) + more


def output_root(overrides: Dict[str, str]) -> Path:
    """``paths.output_root=``, else ``$ATTNFLOW_OUTPUT_DIR``, else outputs."""
    return Path(overrides.get("paths.output_root") or os.environ.get("ATTNFLOW_OUTPUT_DIR") or "outputs")


def find_last(root: Path, experiment: Optional[str]) -> Path:
    """The run of ``experiment`` under ``root`` whose ``last.ckpt`` was written last."""
    runs = sorted((p for p in root.rglob("last.ckpt") if p.parent.name == "checkpoints"),
                  key=lambda p: p.stat().st_mtime, reverse=True)
    for last in runs:
        if run_experiment(last.parent.parent) == experiment:
            return last.parent.parent.resolve()
    raise ResumeError(f"resume=last: no run of experiment '{experiment or 'default'}' with "
                      f"checkpoints/last.ckpt under {root}")


def check_run(run_dir: Path | str) -> Tuple[Dict[str, Any], Dict[str, Any], Path]:
    """(the config of the checkpoint the run resumes from, that checkpoint, its path: ``last.ckpt``
    or, where it is damaged, :func:`_read_last`'s), or a :class:`ResumeError`."""
    run = Path(run_dir)
    last = run / "checkpoints" / "last.ckpt"
    if not (run / "config.yaml").is_file():
        raise ResumeError(f"resume={run}: not an attnflow run directory (no config.yaml)")
    if not last.is_file():
        others = sorted(p.name for p in (run / "checkpoints").glob("*.ckpt"))
        hint = (f". Its checkpoints: {', '.join(others)} (ckpt_path= starts a new run from one)"
                if others else ": nothing to continue")
        raise ResumeError(f"resume={run}: the run has no checkpoints/last.ckpt{hint}")
    path, ckpt = _read_last(run.resolve(), last.stat().st_size, last.stat().st_mtime_ns)
    saved = ckpt.get("attnflow_config")
    if not isinstance(saved, dict):
        raise ResumeError(f"resume={run}: {path} carries no attnflow_config")
    return saved, ckpt, path


@functools.lru_cache(maxsize=1)  # a resume checks its run before Hydra, for its config, as it starts
def _read_last(run: Path, *stamp: int) -> Tuple[Path, Dict[str, Any]]:
    """(path, dictionary) of ``last.ckpt`` (read once while its ``stamp``, size and modification
    time, stays); where it is damaged (its digest differs, it cannot be read), of the newest
    intact training state in ``checkpoints/``, said in one line."""
    last = run / "checkpoints" / "last.ckpt"
    try:
        return last, checkpoints.read_checkpoint(last)
    except CheckpointError as damage:
        found = newest_intact(last.parent, last)
        if found is None:
            raise ResumeError(f"resume={run}: {damage}; no other checkpoint in {last.parent} is "
                              f"intact to resume from") from None
        path, ckpt = found
        if first_rank():
            print(f"attnflow: {damage}; resuming from the newest intact checkpoint, {path.name} "
                  f"(epoch {ckpt.get('epoch')}, step {ckpt.get('global_step')})", file=sys.stderr,
                  flush=True)
        return found


def _refuse_unsafe(keys: Iterable[str], run: Path) -> None:
    bad = [k for k in keys if not _is_safe(k)]
    if bad:
        raise ResumeError(f"resume={run}: {', '.join(repr(k) for k in bad)} would change the "
                          f"resumed run; allowed with resume: {', '.join(sorted(SAFE))}")


def _check_length(limits: Dict[str, Any], typed: Iterable[str], ckpt: Mapping[str, Any], who: str,
                  fit_from: bool = False) -> None:
    """The epoch and step limits must leave something to train beyond the checkpoint ``ckpt``'s,
    else the run would only rewrite its metrics (:func:`_check_epoch_end_under_steps` too).
    ``typed``: the limits given; ``fit_from``: ``ckpt`` starts a new run (``ckpt_path=``)."""
    for key, done, unit in (("trainer.max_epochs", ckpt.get("epoch"), "epoch(s)"),
                            ("trainer.max_steps", ckpt.get("global_step"), "steps")):
        try:
            value = int(limits.get(key))
        except (TypeError, ValueError):
            continue
        if value != -1 and isinstance(done, int) and value <= done:
            own = "" if key in typed else " (the run's own limit)"
            had = (f"the checkpoint was saved after {done} {unit}," if fit_from else
                   f"the run has trained {done} {unit} already")
            raise ResumeError(f"{who}: {had} and {key}={value}{own}, so nothing would be trained; "
                              f"give {key} more than {done} (or -1: no limit)")
    _check_epoch_end_under_steps(limits, ckpt, who)


def _check_epoch_end_under_steps(limits: Dict[str, Any], ckpt: Dict[str, Any], who: str) -> None:
    """Lightning 2.6 counts the epoch a checkpoint was saved at the end of twice when the resumed
    run is step-based, so ``max_epochs`` would end it an epoch early, before ``max_steps``:
    refused. Only the fit loop's counters tell an epoch-end checkpoint (no public API)."""
    total, step = epoch_counts(ckpt), ckpt.get("global_step")
    done = total.get("processed")
    try:
        epochs, steps = int(limits["trainer.max_epochs"]), int(limits["trainer.max_steps"])
    except (KeyError, TypeError, ValueError):
        return
    at_end = (isinstance(done, int) and done > 0 and isinstance(step, int)
              and total.get("started") == done and total.get("completed") == done - 1)
    if at_end and -1 not in (epochs, steps) and (epochs - done - 1) * step / done < steps - step:
        raise ResumeError(f"{who}: its checkpoint was saved at the end of epoch {done}, and under "
                          f"trainer.max_steps={steps} and max_epochs={epochs} Lightning would stop "
                          f"it an epoch early; set one of them to -1")


def next_validation(trainer: Dict[str, Any], done: Any = 0) -> Optional[int]:
    """The first epoch validated after ``done`` when it is beyond ``trainer.max_epochs`` (so
    no epoch trained is validated); else None."""
    every, epochs = trainer.get("check_val_every_n_epoch"), trainer.get("max_epochs")
    if (trainer.get("fast_dev_run") or trainer.get("limit_val_batches") == 0
            or not all(isinstance(v, int) and not isinstance(v, bool) for v in (every, epochs, done))
            or every < 1 or epochs < 1):
        return None
    first = (done // every + 1) * every
    return first if first > epochs else None


def check_resumable(run: Path, values: Dict[str, Any]) -> Tuple[Dict[str, Any], Dict[str, Any], Path]:
    """The checks of ``resume=<run>`` with the overrides ``values`` ({dotted key: value}):
    (the run's config, the checkpoint it resumes from, that checkpoint's path)."""
    _refuse_unsafe(values, run)
    cfg, ckpt, path = check_run(run)
    # (it ended after the state in last.ckpt)
    finished = (final_metrics(run) or {}).get("global_step") == ckpt.get("global_step")
    if finished and not set(values) & set(EXTEND):
        raise ResumeError(f"resume={run}: the run already finished; extend it with "
                          f"trainer.max_epochs=<more>")
    if finished or set(values) & {"trainer.max_epochs", "trainer.max_steps"}:
        _check_length({**_flatten(cfg), **values}, values, ckpt, f"resume={run}")
    return cfg, ckpt, path


def _parse(item: str) -> Tuple[str, str]:
    """(key, value) of a ``key=value`` override, the value unquoted as Hydra reads it."""
    try:
        ov = parse(item)
    except HydraException as err:
        key, eq, value = item.partition("=")
        hint = (f"; a value with spaces or accents is quoted: {shell_word(key, value)}"
                if eq and value and not value[0] in "'\"" else "")
        raise ResumeError(f"cannot read the override {item!r}: {str(err).splitlines()[0]}{hint}") from None
    value = ov.value() if not ov.is_delete() else None
    return ov.get_key_element().split("@", 1)[0], "" if value is None else str(value)


def prepare_argv(args: Sequence[str]) -> List[str]:
    """The Hydra command line for ``resume=…`` in ``args``, checked before Hydra starts (a
    refused resume changes nothing): the run's own directory, no new ``.hydra/``. Without
    ``resume=``, ``args`` unchanged unless their ``hydra.run.dir`` holds a run or other files.
    The run folder named is locked for this process (:mod:`attnflow.training.runlock`) first."""
    parsed = [(a, *_parse(a)) for a in args if "=" in a and not a.startswith("-")]
    values = {k: v for _, k, v in parsed}
    target, pinned = values.get("resume"), values.get("hydra.run.dir")
    if not target:
        if pinned and first_rank():
            _check_new_run_dir(Path(pinned).expanduser())
        return _other_rank(list(args), values)
    flags = [a for a in args if a.startswith("-")]
    if flags:
        raise ResumeError(f"resume= continues one run: it takes no {flags[0]}")
    experiment = values.get("experiment") or None
    run = (find_last(output_root(values), experiment) if target == "last"
           else Path(target).expanduser().resolve())
    if pinned and Path(pinned).expanduser().resolve() != run:  # (a DDP relaunch pins the run's)
        raise ResumeError(f"resume={run} continues in the run's own directory; hydra.run.dir={pinned} "
                          f"names another")
    if first_rank() and run.is_dir():
        runlock.hold(run)
    keep = [item for item, key, _ in parsed
            if key not in ("resume", "experiment", "hydra.run.dir", "hydra.output_subdir")]
    _, ckpt, path = check_resumable(run, {k: v for _, k, v in parsed if k not in ("resume", "experiment")
                                    and not k.startswith(("hydra.", "hydra/"))})
    recorded = run_experiment(run)
    if experiment is not None and experiment != recorded:
        raise ResumeError(f"resume={run}: the run is experiment '{recorded or 'default'}', the "
                          f"command line names experiment={experiment}")
    print(f"attnflow: resuming {run} (experiment {recorded or 'default'}) from "
          f"checkpoints/{path.name}: epoch {ckpt.get('epoch')}, step {ckpt.get('global_step')}",
          file=sys.stderr, flush=True)
    return _other_rank([f"resume={hydra_value(str(run))}", *keep, f"hydra.run.dir={hydra_value(str(run))}",
                        "hydra.output_subdir=null"], values)


def _other_rank(argv: List[str], values: Dict[str, str]) -> List[str]:
    """``argv``; for a rank other than the first, with the :data:`OTHER_RANK` overrides not
    typed already: another node runs the same command at the same time, and must write nothing
    (``.hydra/``, Hydra's ``train.log``) in the run folder that the first rank checks is empty."""
    if first_rank():
        return argv
    return [*argv, *(f"{key}={value}" for key, value in OTHER_RANK.items()
                     if key not in values and f"{key}={value}" not in argv)]


def _check_new_run_dir(run_dir: Path) -> None:
    """A new run's pinned folder: absent or empty (then locked), not a run's or other files'."""
    if (run_dir / "config.yaml").is_file():
        raise ResumeError(f"hydra.run.dir={run_dir} already holds a run (config.yaml); a new run "
                          f"there would overwrite its record (resume={run_dir} continues it)")
    runlock.hold(run_dir)
    found = sorted(p.name for p in run_dir.iterdir() if p.name != runlock.NAME)
    if found:
        runlock.release(run_dir)
        raise ResumeError(f"hydra.run.dir={run_dir} holds files but no run ({', '.join(found[:5])}"
                          f"{', …' if len(found) > 5 else ''}); a run there would overwrite them: "
                          f"name an empty or new folder")


def resume_config(run_dir: Path | str, overrides: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """The config that continues ``run_dir``: its checkpoint's, with the allowed ``overrides``
    ({dotted key: value}) and the checkpoint's W&B run id."""
    run = Path(run_dir).expanduser().resolve()
    overrides = dict(overrides or {})
    cfg, ckpt, _ = check_resumable(run, overrides)
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
    """The composed ``cfg``, or with ``resume=`` the resumed run's config with the overrides
    typed (``typed``, else Hydra's record), their values as Hydra parsed them."""
    target = cfg.get("resume")
    if not target:
        return cfg
    if typed is None:
        typed = HydraConfig.get().overrides.task if HydraConfig.initialized() else ()
    values: Dict[str, Any] = {}
    for item in typed:
        key = item.lstrip("+~").split("=", 1)[0].split("@", 1)[0]
        if key not in ("resume", "experiment") and not key.startswith("hydra"):
            values[key] = OmegaConf.select(cfg, key)
    return resume_config(target, values)


def _dump(data: Any) -> str:
    return OmegaConf.to_yaml(OmegaConf.create(data))


def _start_resumed(resolved: Dict[str, Any], run: Path) -> str:
    """Check a resumed run's config against its checkpoint's and record ``resume-<n>.yaml``;
    the checkpoint to fit from (the read of its checks let go: the fit reads it)."""
    saved, ckpt, path = check_run(run)
    _read_last.cache_clear()
    diffs = differences(with_defaults(saved), resolved)
    _refuse_unsafe([k for k, _, _ in diffs], run)
    record = {"resumed_at": time.strftime("%Y-%m-%d %H:%M:%S"), "command": " ".join(sys.argv),
              "from": {"checkpoint": str(path),
                       "epoch": ckpt.get("epoch"), "global_step": ckpt.get("global_step")},
              "changed": {k: {"from": a, "to": b} for k, a, b in diffs},
              "wandb_run_id": ckpt.get(WANDB_ID_KEY)}
    if (final := final_metrics(run)) is not None:
        record["previous_metrics"] = final.get("metrics")
    if first_rank():  # DDP ranks re-run this: one record
        n = 1 + len(list(run.glob("resume-*.yaml")))
        (run / f"resume-{n}.yaml").write_text(_dump(record))
    return str(path)


def _check_fit_from(ckpt_path: str, resolved: Dict[str, Any], recorded: Dict[str, Any],
                    run_dir: Path) -> None:
    """``ckpt_path=`` of a new run: a training state of the same model, data and task (as
    recorded: ``${oc.env:…}`` unresolved), from another run's directory, with something left
    to train."""
    path = Path(ckpt_path).expanduser()
    if path.resolve().parent.parent == run_dir.resolve():
        raise ResumeError(f"ckpt_path={ckpt_path} is of this run's own directory: continue it "
                          f"with resume={run_dir}")
    try:
        ckpt = checkpoints.read_checkpoint(path)
    except CheckpointError as err:
        raise ResumeError(f"ckpt_path: {err}") from None
    if "pytorch-lightning_version" not in ckpt or "state_dict" not in ckpt:  # Lightning's keys
        raise ResumeError(f"ckpt_path={ckpt_path} holds weights only (keys: "
                          f"{', '.join(sorted(map(str, ckpt))[:6])}), not a training state")
    saved = ckpt.get("attnflow_config")
    diffs = (differences(with_defaults(saved), recorded, only=STATE_DEFINING)
             if isinstance(saved, dict) else [])
    if diffs:
        raise ResumeError(f"ckpt_path={ckpt_path} is a checkpoint of another model, data or task: "
                          f"{_listing(diffs, 'checkpoint', 'this run')}")
    _check_length(_flatten(resolved), EXTEND, ckpt, f"ckpt_path={ckpt_path}", fit_from=True)


def start(resolved: Dict[str, Any], run_dir: Path | str,
          recorded: Optional[Dict[str, Any]] = None) -> Optional[str]:
    """Before any work of a run: the checkpoint to fit from (checked), and the run's record
    (``config.yaml``: ``recorded``, the config as written; a resumed run keeps its own)."""
    run_dir, recorded = Path(run_dir), resolved if recorded is None else recorded
    if resolved.get("resume"):
        run = Path(resolved["resume"]).expanduser().resolve()
        if run != run_dir.resolve():
            raise ResumeError(f"resume={run} continues in its own directory, not {run_dir}")
        return _start_resumed(recorded, run)
    ckpt_path = resolved.get("ckpt_path")
    if ckpt_path:
        _check_fit_from(str(ckpt_path), resolved, recorded, run_dir)
    if first_rank() and (run_dir / "config.yaml").is_file():
        raise ResumeError(f"{run_dir} already holds a run (config.yaml); a new run there would "
                          f"overwrite its record, metrics and checkpoints (resume= continues it)")
    run_dir.mkdir(parents=True, exist_ok=True)
    if first_rank():  # (another node may be the first: it checks that no run is there)
        (run_dir / "config.yaml").write_text(_dump(recorded))
    return str(ckpt_path) if ckpt_path else None
