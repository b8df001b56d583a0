"""The Hydra app of ``attnflow-train`` (:mod:`attnflow.cli.train`): the command line checked,
Hydra run with attnflow's checks on each config it composes, one run (or a sweep's job) trained.

Hydra reads the command line once: :func:`check_composed` is called on every config Hydra
composes, as it composes it (:class:`~attnflow.config.hydra_internals.CheckedConfigLoader`), so
the checks see Hydra's own parse, search path and loader, and add no composition of their own.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import shutil
import signal
import sys
from pathlib import Path
from typing import List, Optional, Tuple

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException
from pytorch_lightning.utilities.exceptions import SIGTERMException

from attnflow import config_dir
from attnflow.config.groups import check_field_overrides, forced_fields
from attnflow.config.hydra_internals import checked_compositions
from attnflow.config.overrides import assignments
from attnflow.config.registry import ConfigError
from attnflow.config.trust import code_refusal
from attnflow.data.errors import DataError
from attnflow.io.console import command
from attnflow.io.metric_names import result_name
from attnflow.io.text import InputError, check_folder, in_the_way
from attnflow.sweep.checks import check_optimized_metric, check_sweep, check_sweep_data
from attnflow.sweep.plugins import optuna_sweep
from attnflow.sweep.pruning import trial_reports
from attnflow.sweep.study import TrialFailed
from attnflow.training import rollback, runlock
from attnflow.training.callbacks import NonFiniteLossError
from attnflow.training.distributed import check_multirun_strategy
from attnflow.training.preemption import Interrupted
from attnflow.training.requeue import forget, requeued_run
from attnflow.training.resume import from_hydra, output_root, prepare_argv
from attnflow.training.run import record_failure, train
from attnflow.training.runlog import final_table, say

CONF_DIR = str(config_dir())  # the checkout's conf/, or the one installed with the package
WRITE_FAULTS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM)
PATH_FAULTS = (errno.ENOTDIR, errno.EEXIST, errno.EISDIR)  # a file where a folder belongs, or so


def launch(argv: List[str]) -> None:
    """``attnflow-train ARGV``, its overrides checked (:func:`attnflow.cli.train.main`):
    completed and run by Hydra."""
    conf = Path(CONF_DIR)
    try:
        note = None
        try:
            argv, note = _requeued(argv)
            if any(a.lstrip("+").startswith(("resume=", "hydra.run.dir=")) for a in argv):
                argv = prepare_argv(argv)  # checked before Hydra starts
            check_field_overrides(argv, conf)
            sys.argv[1:] = argv  # as typed: Hydra's loader completes them (forced_fields)
        except (ConfigError, InputError) as err:
            _refuse(err)
        _run_hydra()
        if note is not None:  # the requeued run has ended
            forget(note)
    finally:
        runlock.release_all()  # (the run or sweep folder locked)


def _run_hydra() -> None:
    logging.raiseExceptions = False  # train.log on a full disk: lines dropped, not a traceback each
    try:
        with checked_compositions(check_composed, forced_fields):
            hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="train")(run_app)()
    except KeyboardInterrupt:  # Ctrl-C before or between the Trainer calls: nothing to save
        print("\nattnflow: interrupted", file=sys.stderr)
        sys.exit(128 + signal.SIGINT)


def _refuse(err: Exception) -> None:
    """One line and exit status 2 (a ResumeError, RunInUseError or InputError says what it is
    itself)."""
    kind = ("data error: " if isinstance(err, DataError) else
            "config error: " if type(err) is ConfigError else "")
    print(f"attnflow: {kind}{err}", file=sys.stderr)
    sys.exit(2)


def check_composed(cfg: DictConfig, first: bool) -> None:
    """Each config Hydra composes names no code (:mod:`attnflow.config.trust`); the first, before
    Hydra configures logging, builds callbacks or makes a folder, also has a run folder that can be
    made, a well-formed sweep and its data files, and locks a sweep folder named outright. Else
    one line and exit status 2."""
    try:
        why = code_refusal(cfg, Path(CONF_DIR))
        if why:
            raise ConfigError(why)
        if first:
            argv = sys.argv[1:]
            multirun = bool({"-m", "--multirun"} & set(argv)) or cfg.hydra.get("mode") == RunMode.MULTIRUN
            folder = _check_output_folder(cfg, multirun)
            if optuna_sweep(cfg):
                check_sweep(cfg)
            if multirun:
                check_sweep_data(cfg, argv)
            if folder is not None:  # after every check: a sweep refused changes none of its files
                runlock.hold(folder, "one sweep runs in a folder at a time; wait for it to end (the "
                                     "same command continues a stopped sweep), or give this one a "
                                     "hydra.sweep.dir of its own")
    except (ConfigError, InputError) as err:
        _refuse(err)


def _requeued(argv: List[str]) -> Tuple[List[str], Optional[Path]]:
    """A requeued SLURM job's command, ``resume=<the run it stopped>``, and its note
    (:mod:`attnflow.training.requeue`, under the output root ``resume=last`` searches); else
    ``(argv, None)``."""
    if os.environ.get("SLURM_RESTART_COUNT", "0") == "0":
        return argv, None
    note = requeued_run(output_root(assignments(argv)))
    if note is None:
        return argv, None
    run = note.read_text().strip()
    print(f"attnflow: a requeued SLURM job: {command('attnflow-train', resume=run)}", file=sys.stderr)
    return [f"resume={run}"], note


def _check_output_folder(cfg: DictConfig, multirun: bool) -> Optional[Path]:
    """The run's folder (a multirun's) can be made and written, before Hydra makes it; the sweep
    folder to lock, where one is named outright (not from the clock)."""
    key = "hydra.sweep.dir" if multirun else "hydra.run.dir"
    try:
        folder = OmegaConf.select(cfg, key, throw_on_resolution_failure=True)
    except OmegaConfBaseException:  # (a resolver only Hydra's run sets: Hydra checks it)
        return None
    check_folder(f"{key}={folder}", Path(folder) / "config.yaml", "name a folder for the run")
    named = "${now:" not in str(OmegaConf.to_container(cfg.hydra.sweep, resolve=False)["dir"])
    return Path(folder) if multirun and named else None


def run_app(cfg: DictConfig) -> float | list | None:
    """The task function Hydra runs once per job; returns ``optimized_metric``'s value (a list of
    values for a list of metrics)."""
    for name in ("pytorch_lightning", "lightning_fabric"):  # Lightning's INFO lines off the console
        logging.getLogger(name).setLevel(logging.WARNING)  # (the run says itself what it does)
    hc = HydraConfig.get()
    out, multirun = Path(hc.runtime.output_dir), hc.mode == RunMode.MULTIRUN
    before = rollback.snapshot(out)  # Hydra's files, a resumed run's
    reports = None
    try:
        check_multirun_strategy(cfg.get("trainer"), multirun)  # ddp would re-run it in every rank
        metric = check_optimized_metric(cfg)  # a misspelt name fails before any work
        reports = trial_reports(hc, metric) if multirun else None  # an Optuna trial's
        if reports is not None and runlock.first_rank():
            reports.start()
        run_cfg = from_hydra(cfg, () if reports is not None else None)  # (a trial resumes as it was)
        summary = train(run_cfg, out, [reports] if reports else [])
    except SIGTERMException:  # Lightning's own stop (between the Trainer calls): exit 0 otherwise
        raise Interrupted(signal.SIGTERM) from None
    except ConfigError as err:  # DataError: a data file missing, empty, cut short or malformed
        why = f"{'data' if isinstance(err, DataError) else 'config'} error: {err}"
        _fail_trial(reports, out, why)
        print(f"attnflow: {why}", file=sys.stderr)
        _take_back(before)
        sys.exit(2)
    except OSError as err:
        _write_fault(err, reports, out, before)
    except NonFiniteLossError as err:
        print(f"attnflow: {err}", file=sys.stderr)
        if metric and multirun:
            return float("nan")  # one diverging job of a sweep: Optuna records a failed trial, the sweep goes on
        sys.exit(1)
    except Exception as err:  # a trial's failure, with its reason; a run's: the traceback
        _fail_trial(reports, out, f"{type(err).__name__}: {err}")
        raise
    finally:
        if reports is not None:
            reports.close()
    final_table(summary)  # the final metrics (global rank 0 only), titled with their weights
    say(f"run folder: {out}")
    return _objective(summary, metric, out, reports)


def _write_fault(err: OSError, reports, out: Path, before: dict) -> None:
    """A full disk, or a file where a folder belongs: one line, what the run wrote taken back
    (or the checkpoints it kept named), exit 1; another OSError: raised (a trial's: failed)."""
    why = (f"cannot write {err.filename or out}: {err.strerror}" if err.errno in WRITE_FAULTS
           else _path_fault(err))
    if not why:
        _fail_trial(reports, out, f"{type(err).__name__}: {err}")
        raise err
    kept = _take_back(before) or rollback.kept(out)
    _fail_trial(reports, out, why)
    print(f"attnflow: {why}; {kept}", file=sys.stderr)
    sys.exit(1)


def _path_fault(err: OSError) -> str:
    """What stands where the run makes a file or folder (its ``err.filename``), or ""."""
    if err.errno not in PATH_FAULTS or not err.filename:
        return ""
    blocker, why = in_the_way(err.filename)
    return why if blocker in (None, Path(err.filename).absolute()) else f"cannot write {err.filename}: {why}"


def _objective(summary: dict, metric, out: Path, reports) -> float | list | None:
    """``optimized_metric``'s value (a list: one per metric) from the run's result (``val/acc``:
    its ``best/val/acc``); a metric the run did not report fails it (exit 2, or a sweep trial's
    failure)."""
    if not metric:
        return None
    wanted = metric if isinstance(metric, list) else [metric]  # what a sweeper optimises
    missing = [m for m in wanted if result_name(m) not in summary["metrics"]]
    if missing:  # an error, not None
        why = (f"optimized_metric '{missing[0]}' was not reported by this run; it reported "
               f"{', '.join(sorted(summary['metrics'])) or 'nothing'}")
        print(f"attnflow: {why}", file=sys.stderr)
        record_failure(out, why)  # its metrics.json is written: attnflow-report must not say ok
        _fail_trial(reports, out, why)
        sys.exit(2)
    values = [summary["metrics"][result_name(m)] for m in wanted]
    return values if isinstance(metric, list) else values[0]


def _fail_trial(reports, out: Path, why: str) -> None:
    """A sweep trial's failure: recorded in its ``metrics.json`` and raised as
    :class:`~attnflow.sweep.study.TrialFailed`, so that the sweep fails the trial and goes on."""
    if reports is None:
        return
    record_failure(out, why, trial={"number": reports.number, "study": reports.study_name,
                                    "state": "fail"})
    raise TrialFailed(why.splitlines()[0] if why else why)


def _take_back(before: dict) -> Optional[str]:
    """A single run that failed before it saved a checkpoint takes back what it wrote since
    ``before`` (:mod:`attnflow.training.rollback`); a new run's folder goes, and its date folder
    if left empty. What it did, if it did."""
    hc = HydraConfig.get()
    out = Path(hc.runtime.output_dir)
    if hc.mode != RunMode.RUN or not out.is_dir() or not rollback.roll_back(out, before):
        return None
    if {p.name for p in out.iterdir()} - {".hydra", "train.log", runlock.NAME}:
        return f"{out} is as it was"
    shutil.rmtree(out, ignore_errors=True)
    if re.fullmatch(r"\d{4}-\d\d-\d\d", out.parent.name):  # outputs/<date>/: where this was its only run
        with contextlib.suppress(OSError):
            out.parent.rmdir()
    return f"{out} is removed"
