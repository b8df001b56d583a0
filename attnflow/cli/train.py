"""``attnflow-train``: the Hydra app that trains one experiment (``python -m attnflow.cli.train``).

    attnflow-train                          # the default: reverse sequences, BiGRU + Bahdanau
    attnflow-train scorer=dot               # swap the attention scorer
    attnflow-train experiment=reverse_multihead logger=wandb

Config errors print one message and exit with status 2; a signal (SIGINT, SIGTERM, SIGUSR1) with
``128 + signal`` (:mod:`attnflow.training.preemption`); a write the disk refuses mid-run with 1
and one line (:mod:`attnflow.training.rollback`); ``--help``: :mod:`attnflow.cli.help`.
"""

from __future__ import annotations

import errno
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from attnflow import config_dir
from attnflow.config.registry import ConfigError
from attnflow.io.console import command
from attnflow.training import rollback
from attnflow.training.onednn import bound_primitive_cache

if TYPE_CHECKING:
    from omegaconf import DictConfig

CONF_DIR = str(config_dir())  # the checkout's conf/, or the one installed with the package
WRITE_FAULTS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM)
PATH_FAULTS = (errno.ENOTDIR, errno.EEXIST, errno.EISDIR)  # a file where a folder belongs, or so


def _requeued(argv: list, conf: Path) -> tuple:
    """A requeued SLURM job's command, ``resume=<the run it stopped>``, and its note
    (:mod:`attnflow.training.requeue`); else ``(argv, None)``."""
    import os

    if os.environ.get("SLURM_RESTART_COUNT", "0") == "0":
        return argv, None
    from attnflow.config.groups import field_overrides
    from attnflow.config.trust import composed
    from attnflow.training.requeue import requeued_run

    cfg = next(composed(field_overrides(argv, conf), conf, run_app), None)
    note = requeued_run(cfg.paths.output_root) if cfg is not None else None
    if note is None:
        return argv, None
    run = note.read_text().strip()
    print(f"attnflow: a requeued SLURM job: {command('attnflow-train', resume=run)}", file=sys.stderr)
    return [f"resume={run}"], note


def _multirun(cfg: DictConfig, argv: list) -> bool:
    from hydra.types import RunMode

    return bool({"-m", "--multirun"} & set(argv)) or cfg.hydra.get("mode") == RunMode.MULTIRUN


def _check_output_folder(cfg: DictConfig, argv: list) -> Path | None:
    """The run's folder (a multirun's) can be made and written, before Hydra makes it; the sweep
    folder to lock, where one is named."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from attnflow.io.text import check_folder

    multirun = _multirun(cfg, argv)
    key = "hydra.sweep.dir" if multirun else "hydra.run.dir"
    try:
        folder = OmegaConf.select(cfg, key, throw_on_resolution_failure=True)
    except OmegaConfBaseException:  # (a resolver only Hydra's run sets: Hydra checks it)
        return None
    check_folder(f"{key}={folder}", Path(folder) / "config.yaml", "name a folder for the run")
    named = "${now:" not in str(OmegaConf.to_container(cfg.hydra.sweep, resolve=False)["dir"])
    return Path(folder) if multirun and named else None


def _lock_sweep_folder(folder: Path | None) -> None:
    """A sweep folder named outright (not from the clock), locked for this sweep once every
    check passed, so that a sweep refused for another's live folder changes none of its files."""
    from attnflow.training import runlock

    if folder is not None:
        runlock.hold(folder, "one sweep runs in a folder at a time; wait for it to end (the same "
                             "command continues a stopped sweep), or give this one a hydra.sweep.dir "
                             "of its own")


def _check_sweep(cfg: DictConfig) -> None:
    """An Optuna sweep's metrics, directions and pruner (:mod:`attnflow.sweep.checks`)."""
    from attnflow.config.sweeps import optuna_sweep

    if optuna_sweep(cfg):
        from attnflow.sweep.checks import check_sweep

        check_sweep(cfg)


def _check_sweep_data(cfg: DictConfig, argv: list) -> None:
    """A multirun's data files are there before its first job makes the sweep's folder
    (:func:`attnflow.sweep.checks.check_sweep_data`); else one line and exit status 2."""
    if not _multirun(cfg, argv):
        return
    from attnflow.data.errors import DataError
    from attnflow.sweep.checks import check_sweep_data

    try:
        check_sweep_data(cfg, argv)
    except DataError as err:
        print(f"attnflow: data error: {err}", file=sys.stderr)
        sys.exit(2)


def run_app(cfg: DictConfig) -> float | list | None:
    """The task function Hydra runs once per job; returns ``optimized_metric``'s value (a list of
    values for a list of metrics)."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode
    from pytorch_lightning.utilities.exceptions import SIGTERMException

    from attnflow.training.callbacks import NonFiniteLossError
    from attnflow.data.errors import DataError
    from attnflow.training.distributed import check_multirun_strategy
    from attnflow.training.preemption import Interrupted
    from attnflow.training.resume import from_hydra  # resume=<run>: the run's own config
    from attnflow.training.run import train
    from attnflow.training.runlock import first_rank
    from attnflow.sweep.checks import check_optimized_metric
    from attnflow.sweep.pruning import trial_reports

    quiet_lightning()
    hc = HydraConfig.get()
    out, multirun = Path(hc.runtime.output_dir), hc.mode == RunMode.MULTIRUN
    before = rollback.snapshot(out)  # Hydra's files, a resumed run's
    reports = None
    try:
        check_multirun_strategy(cfg.get("trainer"), multirun)  # ddp would re-run it in every rank
        metric = check_optimized_metric(cfg)  # a misspelt name fails before any work
        reports = trial_reports(hc, metric) if multirun else None  # an Optuna trial's
        if reports is not None and first_rank():
            reports.start()
        run_cfg = from_hydra(cfg, () if reports is not None else None)  # (a trial resumes as it was)
        summary = train(run_cfg, out, [reports] if reports else [])
    except SIGTERMException:  # Lightning's own stop (between the Trainer calls): exit 0 otherwise
        raise Interrupted(signal.SIGTERM) from None
    except ConfigError as err:  # DataError: a data file missing, empty, cut short or malformed
        kind = "data" if isinstance(err, DataError) else "config"
        _fail_trial(reports, out, f"{kind} error: {err}")
        print(f"attnflow: {kind} error: {err}", file=sys.stderr)
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
    _print_summary(summary, out)
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
    from attnflow.io.text import in_the_way

    if err.errno not in PATH_FAULTS or not err.filename:
        return ""
    blocker, why = in_the_way(err.filename)
    return why if blocker in (None, Path(err.filename).absolute()) else f"cannot write {err.filename}: {why}"


def _objective(summary: dict, metric, out: Path, reports) -> float | list | None:
    """``optimized_metric``'s value (a list: one per metric) from the run's final metrics; a
    metric the run did not report fails it (exit 2, or a sweep trial's failure)."""
    from attnflow.training.run import record_failure

    if not metric:
        return None
    wanted = metric if isinstance(metric, list) else [metric]  # what a sweeper optimises
    missing = [m for m in wanted if m not in summary["metrics"]]
    if missing:  # an error, not None
        why = (f"optimized_metric '{missing[0]}' was not reported by this run; it reported "
               f"{', '.join(sorted(summary['metrics'])) or 'nothing'}")
        print(f"attnflow: {why}", file=sys.stderr)
        record_failure(out, why)  # its metrics.json is written: attnflow-report must not say ok
        _fail_trial(reports, out, why)
        sys.exit(2)
    values = [summary["metrics"][m] for m in wanted]
    return values if isinstance(metric, list) else values[0]


def _fail_trial(reports, out: Path, why: str) -> None:
    """A sweep trial's failure: recorded in its ``metrics.json`` and raised as
    :class:`~attnflow.sweep.study.TrialFailed`, so that the sweep fails the trial and goes on."""
    if reports is None:
        return
    from attnflow.sweep.study import TrialFailed
    from attnflow.training.run import record_failure

    record_failure(out, why, trial={"number": reports.number, "study": reports.study_name,
                                    "state": "fail"})
    raise TrialFailed(why.splitlines()[0] if why else why)


def quiet_lightning() -> None:
    """Lightning's INFO lines off the console (its tips, "GPU available", checkpoint restored):
    the run says where it is and what it trains itself (:mod:`attnflow.training.runlog`)."""
    import logging

    for name in ("pytorch_lightning", "lightning_fabric"):
        logging.getLogger(name).setLevel(logging.WARNING)


def _take_back(before: dict) -> str | None:
    """A single run that failed before it saved a checkpoint takes back what it wrote since
    ``before`` (:mod:`attnflow.training.rollback`); a new run's folder goes, and its date folder
    if left empty. What it did, if it did."""
    import contextlib
    import re
    import shutil

    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from attnflow.training import runlock

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


def _print_summary(summary: dict, out: Path) -> None:
    """The final metrics as a table (global rank 0 only), titled with the weights they are of,
    then the run's folder."""
    from attnflow.training.runlog import final_table, say

    final_table(summary)
    say(f"run folder: {out}")


def main() -> None:
    """The console script: overrides are checked and completed, then Hydra runs the app."""
    bound_primitive_cache()  # before any tensor work: oneDNN reads it once
    if {"-h", "--help"} & set(sys.argv[1:]):
        from attnflow.cli.help import train_help

        try:
            print(train_help(Path(CONF_DIR)))
        except BrokenPipeError:  # `attnflow-train --help | head`
            sys.stderr.close()
        return
    from attnflow.cli.help import unknown_override
    from attnflow.config.overrides import split_value
    from attnflow.config.sweeps import missing_plugin
    from attnflow.io.console import plain_warnings

    plain_warnings()  # attnflow's warnings as one line each
    argv, conf = sys.argv[1:], Path(CONF_DIR)
    missing = split_value(argv) or missing_plugin(argv, conf)  # before Hydra, whose messages
    unknown = None if missing else unknown_override(argv, conf)  # span a dozen lines
    if missing or unknown:
        print(f"attnflow: {missing or 'config error: ' + unknown}", file=sys.stderr)
        sys.exit(2)
    from attnflow.training import runlock

    try:
        _run_hydra(argv, conf)
    finally:
        runlock.release_all()  # (the run folder prepare_argv locked)


def _run_hydra(argv: list, conf: Path) -> None:
    """``argv`` checked, completed and run by Hydra."""
    from attnflow.config.groups import field_overrides
    from attnflow.config.trust import code_refusal, composed
    from attnflow.io.text import InputError

    try:
        argv, note = _requeued(argv, conf)
        if any(a.lstrip("+").startswith(("resume=", "hydra.run.dir=")) for a in argv):
            from attnflow.training.resume import prepare_argv  # checked before Hydra starts

            argv = prepare_argv(argv)
        sys.argv[1:] = field_overrides(argv, conf)
        sweep_folder = None
        for n, cfg in enumerate(composed(sys.argv[1:], conf, run_app)):  # what Hydra loads
            why = code_refusal(cfg, conf)
            if why:
                raise ConfigError(why)
            if n == 0:
                sweep_folder = _check_output_folder(cfg, sys.argv[1:])
                _check_sweep(cfg)
                _check_sweep_data(cfg, sys.argv[1:])
        _lock_sweep_folder(sweep_folder)
    except (ConfigError, InputError) as err:  # a ResumeError or RunInUseError says what it is itself
        print(f"attnflow: {'config error: ' if type(err) is ConfigError else ''}{err}",
              file=sys.stderr)
        sys.exit(2)
    import logging

    import hydra

    logging.raiseExceptions = False  # train.log on a full disk: lines dropped, not a traceback each

    try:
        hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="train")(run_app)()
    except KeyboardInterrupt:  # Ctrl-C before or between the Trainer calls: nothing to save
        print("\nattnflow: interrupted", file=sys.stderr)
        sys.exit(128 + signal.SIGINT)
    if note is not None:  # the requeued run has ended
        from attnflow.training.requeue import forget

        forget(note)


if __name__ == "__main__":
    main()
