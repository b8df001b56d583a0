"""What attnflow adds to Hydra's sweepers and launchers (docs/sweeps.md).

- :func:`missing_plugin`: a sweep or launcher whose plugin is not installed is named, with the
  extra that installs it, before Hydra starts (Hydra would print a traceback about a config it
  cannot find). Only file text is read here: no Hydra, no Optuna imported.
- :func:`continue_optuna_studies`: an Optuna study whose storage already holds trials (the
  ``sqlite:///${hydra.sweep.dir}/optuna.db`` of ``conf/hparams_search/*_optuna.yaml``) continues:
  ``hydra.sweeper.n_trials`` counts the finished trials already there, and new jobs are numbered
  after the trials already in the study (job number = Optuna trial number), so the folders of
  earlier jobs are never reused; the sampler is reseeded (a seeded sampler would propose the
  study's first trials again). The stock sweeper (hydra-optuna-sweeper 1.3) runs ``n_trials``
  more and numbers its jobs from 0 again, overwriting ``<sweep dir>/0/`` and on.
- :func:`check_optimized_metric`: ``optimized_metric`` (what a job returns to the sweeper) must be
  a metric the task logs at the end of a run, checked before any data is made.
- :func:`check_sweep_values`: every value of a sweep's search space is checked as the run would
  check it (unknown fields, types, ranges, the composition contract) before Hydra starts the
  first job: ``model.dropout=0.1,0.5,1.5`` is refused whole, not after two jobs have trained;
  values refused only together (``trainer.max_epochs=2,1 trainer.check_val_every_n_epoch=1,2``)
  too: in a grid of at most ``COMBINATIONS_CHECKED`` jobs every job, in a larger one every pair of
  two keys' values (up to ``JOBS_CHECKED`` jobs composed).
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import itertools
import logging
import math
import os
import re
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

log = logging.getLogger(__name__)

# plugin → (modules it needs, the pip extra that installs them, what it is)
PLUGINS = {
    "optuna": (("optuna", "hydra_plugins.hydra_optuna_sweeper"), "sweep", "the Optuna sweeper"),
    "joblib": (("joblib", "hydra_plugins.hydra_joblib_launcher"), "launchers", "the joblib launcher"),
    "submitit": (("submitit", "hydra_plugins.hydra_submitit_launcher"), "launchers",
                 "the submitit launcher"),
}


def _defaults(path: Path) -> list:
    """The defaults list of a config file ([] when it has none or is not YAML we can read)."""
    import yaml  # PyYAML, which OmegaConf already imports

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return []
    return list(data.get("defaults") or []) if isinstance(data, dict) else []


def _plugin_of(group: str, option: str, conf_dir: Path, seen: set) -> Optional[str]:
    """The plugin behind ``hydra/sweeper=option`` or ``hydra/launcher=option`` (also one of our
    launcher files, which extend a plugin's config), or None."""
    if group == "hydra/sweeper":
        return "optuna" if option == "optuna" else None
    if option == "joblib":
        return "joblib"
    if option.startswith("submitit"):
        return "submitit"
    path = conf_dir / group / f"{option}.yaml"
    if path.is_file() and path not in seen:
        seen.add(path)
        for entry in _defaults(path):  # `- joblib`: our file extends the plugin's config
            found = isinstance(entry, str) and _plugin_of(group, entry, conf_dir, seen)
            if found:
                return found
    return None


def _choices(argv: Iterable[str], conf_dir: Path) -> Iterable[Tuple[str, str, str]]:
    """(group, option, the argument) for each group choice on the command line."""
    for arg in argv:
        key, eq, value = arg.lstrip("+").partition("=")
        if not eq or arg.startswith(("++", "~", "-")):
            continue
        if "/" in key or ("." not in key and (conf_dir / key).is_dir()):
            for option in value.split(","):  # a multirun over options: each of them
                yield key, option.strip(), arg


def required_plugins(argv: Iterable[str], conf_dir: Path) -> Iterable[Tuple[str, str]]:
    """(plugin, the argument that needs it) for the sweepers and launchers the command line picks,
    directly (``hydra/sweeper=optuna``) or through a config's defaults list
    (``hparams_search=gat_cora_optuna`` → ``override /hydra/sweeper: optuna``)."""
    for group, option, arg in _choices(argv, conf_dir):
        seen: set = set()
        if group in ("hydra/sweeper", "hydra/launcher"):
            plugin = _plugin_of(group, option, conf_dir, seen)
            if plugin:
                yield plugin, arg
            continue
        path = conf_dir / group / f"{option}.yaml"
        for entry in _defaults(path) if path.is_file() else []:
            for key, sub_option in (entry.items() if isinstance(entry, dict) else ()):
                sub_group = re.sub(r"^override\s+/?", "", str(key))
                if sub_group in ("hydra/sweeper", "hydra/launcher") and isinstance(sub_option, str):
                    plugin = _plugin_of(sub_group, sub_option, conf_dir, seen)
                    if plugin:
                        yield plugin, arg


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def missing_module(plugin: str) -> Optional[str]:
    """The first module that ``plugin`` (a key of :data:`PLUGINS`) needs and that is not
    installed, else None (also for ``attnflow-train --help``'s "not installed" notes)."""
    return next((m for m in PLUGINS[plugin][0] if not _importable(m)), None)


def missing_plugin(argv: Iterable[str], conf_dir: Path) -> Optional[str]:
    """One line naming the first plugin the command line needs that is not installed, else None."""
    for plugin, arg in required_plugins(argv, conf_dir):
        module = missing_module(plugin)
        if module:
            _, extra, what = PLUGINS[plugin]
            return (f"{arg} needs {what}, which is not installed (no module '{module}'): "
                    f'pip install -e ".[{extra}]" in a checkout, or pip install "attnflow[{extra}]"')
    return None


# -- Optuna: a study in a storage continues --------------------------------------------------------
def _continuing(sweep):
    @functools.wraps(sweep)
    def wrapper(self, arguments):
        impl = self.sweeper  # OptunaSweeperImpl: storage, study_name, n_trials, job_idx
        storage = impl.storage
        if isinstance(storage, str) and storage.startswith("sqlite:///"):
            # the database lives in the sweep folder, which the launcher makes only later
            Path(storage[len("sqlite:///"):]).parent.mkdir(parents=True, exist_ok=True)
        if storage and impl.study_name:
            import optuna

            names = {s.study_name for s in optuna.get_all_study_summaries(storage)}
            if impl.study_name in names:
                trials = optuna.load_study(study_name=impl.study_name, storage=storage).trials
                finished = sum(t.state.is_finished() for t in trials)
                impl.job_idx = max(impl.job_idx, len(trials))
                if trials and hasattr(impl.sampler, "reseed_rng"):
                    impl.sampler.reseed_rng()  # else a seeded sampler repeats the study's first trials
                wanted, impl.n_trials = impl.n_trials, max(0, impl.n_trials - finished)
                log.info(f"Study {impl.study_name!r} in {storage} has {finished} finished trials "
                         f"(of {len(trials)}): {impl.n_trials} more to reach n_trials={wanted}; "
                         f"jobs are numbered from {impl.job_idx}")
        return sweep(self, arguments)

    wrapper._attnflow_continuing = True
    return wrapper


def continue_optuna_studies() -> None:
    """Make hydra-optuna-sweeper continue a study found in its storage (see the module docstring);
    a no-op where the plugin is not installed. Patches the class Hydra's plugin registry holds
    (its scan re-executes plugin modules, so a class imported before it is not the one used);
    imports no Optuna."""
    from hydra.core.plugins import Plugins

    logging.getLogger("alembic").setLevel(logging.WARNING)  # Optuna's storage: "setup plugin …" at INFO
    cls = Plugins.instance().class_name_to_class.get(
        "hydra_plugins.hydra_optuna_sweeper.optuna_sweeper.OptunaSweeper")
    if cls is not None and not getattr(cls.sweep, "_attnflow_continuing", False):
        cls.sweep = _continuing(cls.sweep)


# -- the metric a job returns -----------------------------------------------------------------------
def _unread_split(cfg: Any, split: str) -> Optional[str]:
    """Why a run of ``cfg`` reports no metric of ``split`` at its end, or None where it does:
    ``test=false``, or ``trainer.limit_<split>_batches=0`` (the final validate/test then runs on
    no batch and returns no metric; the run wrote its metrics.json, then failed for want of one)."""
    if split == "test" and not cfg.get("test", True):
        return "test=false: no test metrics"
    from attnflow.training.trainer_checks import reads_no_batch

    limit = (cfg.get("trainer") or {}).get(f"limit_{split}_batches")
    if reads_no_batch(limit):
        return f"trainer.limit_{split}_batches={limit}: the final {split} pass reads no batch"
    return None


def final_metric_names(cfg: Any) -> list:
    """The metrics a run of ``cfg`` reports at its end (``metrics.json``): the task's metrics on
    the validation and test splits, less a split it does not evaluate (:func:`_unread_split`)."""
    from attnflow.config.registry import TASKS
    from attnflow.training.validate import metric_names

    splits = tuple(s for s in ("val", "test") if not _unread_split(cfg, s))
    return metric_names(TASKS.get(cfg["task"]["name"]), cfg, splits) if splits else []


def check_optimized_metric(cfg: Any) -> Optional[str]:
    """``cfg.optimized_metric`` when it names a metric the run reports, None when unset; else a
    :class:`~attnflow.config.registry.ConfigError` naming the metrics there are (before any work)."""
    from attnflow.config.registry import ConfigError, suggest

    metric = cfg.get("optimized_metric")
    if not metric:
        return None
    names = final_metric_names(cfg)
    if metric not in names:
        split = str(metric).split("/", 1)[0]
        why = _unread_split(cfg, split) if split in ("val", "test") else None
        off = f" ({why})" if why else ""
        from attnflow.config.registry import TASKS

        field = getattr(TASKS.get(cfg["task"]["name"]), "conditional_metrics", {}).get(
            str(metric).rsplit("/", 1)[-1])
        if field and not why:  # a metric of the task that this config switches off
            off = f" (with task.{field}={cfg['task'].get(field) or 0}: it is logged where task.{field} > 0)"
        raise ConfigError(f"optimized_metric '{metric}' (at 'optimized_metric') is not a metric that "
                          f"task '{cfg['task']['name']}' reports at the end of a run{off}; it reports "
                          f"{', '.join(names) or 'nothing'}.{suggest(str(metric), names)}")
    return metric


def _directions(direction: Any) -> List[str]:
    """An Optuna sweeper's ``direction`` as lower-case names, one per objective: typed, it is a
    string (or a list of them); left at the sweeper's default, OmegaConf gives its ``Direction``
    enum (``Direction.minimize``), whose name is the direction."""
    from omegaconf import ListConfig

    items = direction if isinstance(direction, (list, tuple, ListConfig)) else [direction]
    return [str(getattr(d, "name", d)).lower() for d in items]


def check_direction(cfg: Any, sweeper: Any) -> None:
    """An Optuna sweeper's ``direction`` against the way the task ranks ``optimized_metric``
    (``Task.metrics``: loss is 'min', accuracy 'max'): a mismatch would make the study seek the
    worst runs, so it is a :class:`~attnflow.config.registry.ConfigError` naming the direction to set."""
    from attnflow.config.registry import TASKS, ConfigError

    direction, metric = sweeper.get("direction"), cfg.get("optimized_metric")
    names = _directions(direction) if direction is not None else []
    if len(names) != 1 or not metric:
        return
    mode = (getattr(TASKS.get(cfg["task"]["name"]), "metrics", None) or {}).get(metric.rsplit("/", 1)[-1])
    wanted = {"max": "maximize", "min": "minimize"}.get(mode)
    if wanted and names[0] != wanted:
        default = "" if isinstance(direction, str) else " (the sweeper's default: none was set)"
        raise ConfigError(f"optimized_metric={metric} is better {'higher' if mode == 'max' else 'lower'} "
                          f"(task '{cfg['task']['name']}'), but hydra.sweeper.direction={names[0]}{default} "
                          f"would seek the worst runs: set hydra.sweeper.direction={wanted}")


# -- the search space ---------------------------------------------------------------------------------
def _probe_values(override) -> list:
    """The values of a sweep override to check: each of a choice, the first and last of a range,
    both ends of an interval (Optuna samples in [low, high])."""
    if override.is_discrete_sweep():
        values = list(override.sweep_string_iterator())
        return values if type(override.value()).__name__ == "ChoiceSweep" else values[:1] + values[-1:]
    value = override.value()
    return [str(value.start), str(value.end)]


COMBINATIONS_CHECKED = 16  # a grid of at most this many probed jobs is checked job by job (≈ 1 s a job)
JOBS_CHECKED = 32  # a larger grid: jobs composed in all, at most (≈ 0.6–1.3 s a job), to check its pairs


def _pairwise(space: Dict[str, list], done: List[Dict[str, str]]) -> List[Dict[str, str]]:
    """Jobs that, with ``done``, hold every pair of two keys' values at least once (a pairwise
    covering array; a deterministic form of the greedy construction of Cohen et al. 1997, "The AETG
    system", IEEE TSE 23(7)): each job starts from the first pair not yet held and gives every other
    key the value that adds the most unheld pairs with the keys set so far (the first such value on
    a tie), so a 3 × 4 × 5 grid of 60 jobs is covered by 22 in all. Values refused only together
    are, in practice, refused in twos (``trainer.max_epochs=1`` with
    ``trainer.check_val_every_n_epoch=2``)."""
    keys = list(space)

    def pairs(job: Dict[str, str]) -> set:
        return {(a, job[a], b, job[b]) for a, b in itertools.combinations(keys, 2) if a in job and b in job}
    unheld = {(a, x, b, y) for a, b in itertools.combinations(keys, 2) for x in space[a] for y in space[b]}
    for job in done:
        unheld -= pairs(job)
    jobs = []
    while unheld:
        a, x, b, y = min(unheld, key=lambda p: (keys.index(p[0]), keys.index(p[2]),
                                                space[p[0]].index(p[1]), space[p[2]].index(p[3])))
        job = {a: x, b: y}
        for k in keys:
            if k not in job:
                job[k] = max(space[k], key=lambda v: len(pairs({**job, k: v}) & unheld))
        job = {k: job[k] for k in keys}
        unheld -= pairs(job)
        jobs.append(job)
    return jobs


def _trials(space: Dict[str, list]) -> List[Tuple[Optional[str], Dict[str, str]]]:
    """The jobs :func:`check_sweep_values` composes, as (the one key varied from the first job, or
    None; {key: value}): the first job, then each key's other values with the rest at their first,
    so a value refused on its own is named alone; then, for the values refused only together
    (``trainer.max_epochs=2,1 trainer.check_val_every_n_epoch=1,2``: the job (1, 2) never
    validates), where the grid of probed values has at most ``COMBINATIONS_CHECKED`` jobs every
    other job of it, and in a larger grid jobs that hold every pair of two keys' values
    (:func:`_pairwise`), up to ``JOBS_CHECKED`` jobs in all: a grid whose pairs need more is
    checked that far (a warning says how many more jobs its pairs would need)."""
    keys = list(space)
    first = {k: v[0] for k, v in space.items()}
    only = keys[0] if len(keys) == 1 else None  # one key: its first value's fault is that value's
    trials = [(only, first)] + [(k, {**first, k: v}) for k, values in space.items() for v in values[1:]]
    if len(keys) < 2:
        return trials
    if math.prod(len(v) for v in space.values()) <= COMBINATIONS_CHECKED:
        seen = {tuple(job.values()) for _, job in trials}
        return trials + [(None, dict(zip(keys, combo))) for combo in itertools.product(*space.values())
                         if combo not in seen]
    more = _pairwise(space, [job for _, job in trials])
    room = max(0, JOBS_CHECKED - len(trials))
    if len(more) > room:
        log.warning("the sweep's grid is large: %d of its jobs are checked before the first starts, "
                    "%d more would be needed to check every pair of two keys' values together",
                    len(trials) + room, len(more) - room)
    return trials + [(None, job) for job in more[:room]]


def chooses_multirun_file(args: Iterable[str], conf_dir: Path) -> bool:
    """Whether a config file chosen on the command line (e.g. ``experiment=my_sweep``) names
    ``MULTIRUN`` — a file that sets ``hydra.mode`` itself makes a sweep without ``-m``. File text
    only, so a single run is not composed a second time to learn it is one."""
    for group, option, _ in _choices(args, conf_dir):
        try:
            if "MULTIRUN" in (conf_dir / group / f"{option}.yaml").read_text(encoding="utf-8"):
                return True
        except OSError:
            continue
    return False


def _continues_study(sweeper: Any) -> bool:
    """Whether an Optuna sweeper's storage already holds its ``study_name`` (then its new jobs
    are numbered after the study's trials, :func:`_continuing`, in new folders)."""
    storage, name = sweeper.get("storage"), sweeper.get("study_name")
    if not (isinstance(storage, str) and storage.startswith("sqlite:///") and name):
        return False
    if not Path(storage[len("sqlite:///"):]).is_file():
        return False
    import optuna

    try:
        return name in {s.study_name for s in optuna.get_all_study_summaries(storage)}
    except Exception:  # noqa: BLE001  (not a study database: the sweeper reports it)
        return False


def _is_optuna(sweeper: Any) -> bool:
    return "optuna" in str(sweeper.get("_target_", "")).lower()


def _job_count(sweeper: Any, space: dict) -> int:
    """How many jobs a sweep makes: Optuna's n_trials, else the product of the value lists (the
    first and last of a range count as its values: at least as many)."""
    if _is_optuna(sweeper):
        return int(sweeper.get("n_trials") or 1)
    jobs = 1
    for values in space.values():
        jobs *= len(values)
    return jobs


def check_sweeper(sweeper: Any, parsed: list, space: dict, resolved: Any) -> None:
    """What Hydra or Optuna would refuse only with a traceback, or not at all: an ``interval()``
    for the basic sweeper (which takes lists, ``range()``, ``choice()``); Optuna's ``n_trials``
    below 1, a ``direction`` that is not minimize/maximize, or one that contradicts the study
    stored under its ``study_name``; a W&B ``run_id`` shared by several jobs (they would
    log into one W&B run), and a W&B run name they would share. Raises
    :class:`~attnflow.config.registry.ConfigError`."""
    from attnflow.config.registry import ConfigError

    optuna = _is_optuna(sweeper)
    if not optuna:
        for o in parsed:
            if o.is_sweep_override() and type(o.value()).__name__ == "IntervalSweep":
                raise ConfigError(f"{o.input_line.lstrip('+')}: interval() is a range for a search "
                                  f"(an Optuna sweep: hparams_search=… or hydra/sweeper=optuna); the "
                                  f"basic sweeper (-m) takes lists a,b,c, range() or choice()")
    else:
        n_trials, direction = sweeper.get("n_trials"), sweeper.get("direction")
        if not isinstance(n_trials, int) or n_trials < 1:
            raise ConfigError(f"hydra.sweeper.n_trials must be an int >= 1, got {n_trials!r}")
        wanted = _directions(direction)
        if any(d not in ("minimize", "maximize") for d in wanted):
            raise ConfigError(f"hydra.sweeper.direction must be minimize or maximize (a list of "
                              f"them for several objectives), got {direction!r}")
        stored = _stored_directions(sweeper)
        if stored and stored != wanted:
            raise ConfigError(f"hydra.sweeper.direction={wanted[0] if len(wanted) == 1 else wanted} "
                              f"differs from the study "
                              f"'{sweeper.get('study_name')}' stored in {sweeper.get('storage')}, which "
                              f"{'/'.join(stored)}s: continue it with hydra.sweeper.direction="
                              f"{stored[0] if len(stored) == 1 else stored}, or start another study "
                              f"(another hydra.sweeper.study_name or sweep folder)")
        if resolved is not None and not resolved.get("optimized_metric"):
            raise ConfigError(_no_objective(resolved))
    loggers = (resolved.get("logger") or {}) if resolved else {}
    wandb = loggers.get("wandb") or {}
    if wandb.get("run_id") and _job_count(sweeper, space) > 1:
        raise ConfigError(f"logger.wandb.run_id={wandb['run_id']} names one W&B run for every job of "
                          f"the sweep, whose logs would be merged into it; leave it null (a W&B run "
                          f"per job)")
    _check_one_name(loggers, (resolved.get("run") or {}) if resolved else {},
                    _job_count(sweeper, space) > 1 and not {"run.name", "logger.wandb.run_name"} & {
                        k.lstrip("+~") for k in space})


def _check_one_name(loggers: Any, run: Any, alike: bool) -> None:
    """A fixed W&B run name in a sweep of several jobs (``alike``: the name is not swept) would
    name them all alike: W&B's runs table could not tell them apart."""
    from attnflow.config.registry import ConfigError

    named = [("logger.wandb.run_name", (loggers.get("wandb") or {}).get("run_name")),
             ("run.name", run.get("name"))]
    if not any(name for _, name in named):  # W&B's variable, which names the run where they do not
        named.append(("$WANDB_NAME", os.environ.get("WANDB_NAME")))
    for key, name in named:
        if alike and name and "wandb" in loggers:
            how = "unset it" if key == "$WANDB_NAME" else f"leave it null, or sweep it ({key}=a,b)"
            raise ConfigError(f"{key}={name} gives every job of the sweep the one W&B run name, so "
                              f"W&B's runs table could not tell them apart; {how} (each job is "
                              f"named from the experiment and its overrides, e.g. 'default "
                              f"scorer=dot')")


def _no_objective(cfg: Any) -> str:
    """Why an Optuna sweep without ``optimized_metric`` is refused, naming the metric to set: the
    run's checkpoint metric (each job would return None, which the study cannot rank: its trials
    train, then the sweep stops with "No trials are completed yet")."""
    from attnflow.config.registry import TASKS

    name = cfg["task"]["name"]
    task = TASKS.get(name)
    metric = ((cfg.get("callbacks") or {}).get("checkpoint") or {}).get("monitor") or task.monitor
    mode = (getattr(task, "metrics", None) or {}).get(str(metric).rsplit("/", 1)[-1])
    direction = {"max": " with hydra.sweeper.direction=maximize", "min": ""}.get(mode, "")
    return (f"an Optuna sweep needs optimized_metric, the metric each job returns to the study (none "
            f"is set: every trial would train, then the sweep would stop with no trial completed); "
            f"set optimized_metric={metric} (task '{name}''s checkpoint metric){direction}")


def _stored_directions(sweeper: Any) -> list:
    """The directions of the Optuna study the sweeper would continue ([] when none is stored)."""
    if not _continues_study(sweeper):
        return []
    import optuna

    study = optuna.load_study(study_name=sweeper.get("study_name"), storage=sweeper.get("storage"))
    return [d.name.lower() for d in study.directions]


def _other_study_command(hydra_cfg: Any, args: Sequence[str], space: dict) -> Optional[str]:
    """Where an Optuna study stored in the sweep folder continues: why its earlier trials came
    from another command (other fixed overrides than these ``args``, the searched keys of
    ``space`` and ``hydra.*`` aside, as its first job's ``.hydra/overrides.yaml`` records them),
    or None. One study ranks its trials against each other, so trials of another experiment,
    model or data would be ranked as if they were comparable."""
    import yaml

    from attnflow.training.resume import _parse  # an override as Hydra reads it

    if not (_is_optuna(hydra_cfg.sweeper) and _continues_study(hydra_cfg.sweeper)):
        return None
    folder = Path(str(hydra_cfg.sweep.dir)).expanduser()
    jobs = sorted((int(d.name), d) for d in folder.iterdir() if d.name.isdigit()) if folder.is_dir() else []
    try:
        before = yaml.safe_load((jobs[0][1] / ".hydra" / "overrides.yaml").read_text())
    except (IndexError, OSError, yaml.YAMLError):  # no job recorded: nothing to compare
        return None
    searched = {str(k).lstrip("+~") for k in space}

    def fixed(items: Any) -> Dict[str, Tuple[str, str]]:  # {key: (value as Hydra reads it, typed)}
        out = {}
        for item in map(str, items or ()):
            key = item.split("=", 1)[0].lstrip("+~")
            if not key.startswith("hydra.") and key not in searched:
                out[key] = (_parse(item)[1], item.lstrip("+~"))  # (false and False: one value)
        return out

    earlier, ours = fixed(before), fixed(args)
    if {k: v[0] for k, v in earlier.items()} == {k: v[0] for k, v in ours.items()}:
        return None

    def shown(overrides: Dict[str, Tuple[str, str]]) -> str:
        return " ".join(sorted(typed for _, typed in overrides.values())) or "none"

    return (f"hydra.sweep.dir={folder} holds the Optuna study '{hydra_cfg.sweeper.get('study_name')}' "
            f"of another command (its fixed overrides: {shown(earlier)}; this one's: "
            f"{shown(ours)}): the study would rank the trials of both as one search. Continue it "
            f"with its own overrides, or give this sweep another folder (or "
            f"hydra.sweeper.study_name)")


def sweep_folder_taken(hydra_cfg: Any, space: dict) -> Optional[str]:
    """Why a multirun's jobs would overwrite earlier results, or None: its ``hydra.sweep.dir``
    already holds a sweep or runs (Hydra would rewrite the jobs' ``.hydra/``, the jobs their
    config, metrics and checkpoints), unless an Optuna study there continues; or a
    ``hydra.sweep.subdir`` without an interpolation puts every job in one folder."""
    from omegaconf import OmegaConf

    from attnflow.training.resume import recorded_work

    sweep = OmegaConf.to_container(hydra_cfg.sweep, resolve=False)
    subdir = str(sweep.get("subdir"))
    optuna = _is_optuna(hydra_cfg.sweeper)
    if "${" not in subdir and (_job_count(hydra_cfg.sweeper, space) > 1 or optuna):
        return (f"hydra.sweep.subdir={subdir} names one folder for every job of the sweep: each "
                f"job would overwrite the one before. Leave it at its default, ${{hydra.job.num}}")
    folder = Path(str(hydra_cfg.sweep.dir)).expanduser()
    held = recorded_work(folder)
    if held and not (optuna and _continues_study(hydra_cfg.sweeper)):
        return (f"hydra.sweep.dir={folder} already holds {held}, which this sweep's jobs would "
                f"overwrite. Give it another folder (hydra.sweep.dir's default is a new dated one), or, "
                f"for an Optuna study stored there, continue it with its hydra.sweeper.study_name")
    return None


def _unknown_plugin_field(err: Exception) -> Optional[str]:
    """A sweeper's or launcher's field that does not exist (``hydra.sweeper.n_trial=2``), from
    Hydra's composition error, as one line naming the fields there are; None for another error.
    (Hydra printed five lines and a hint to set HYDRA_FULL_ERROR, exit 1.)"""
    import dataclasses

    from attnflow.config.registry import suggest

    cause, typ = err.__cause__, getattr(err.__cause__, "object_type", None)
    key, full = getattr(cause, "key", None), str(getattr(cause, "full_key", ""))
    if not (full.startswith(("hydra.sweeper.", "hydra.launcher.")) and dataclasses.is_dataclass(typ)):
        return None
    fields = [f.name for f in dataclasses.fields(typ) if f.name not in ("_target_", "defaults")]
    return (f"{full}: {full.split('.')[1]} {typ.__name__} has no field '{key}'; its fields: "
            f"{', '.join(fields)}.{suggest(str(key), fields)}")


def _hydra_sweep(parsed: list) -> Optional[str]:
    """Why a command line's sweep over a ``hydra.*`` key (``+hydra.sweeper.params.scorer=
    choice(dot,additive)``) is refused, naming the override that searches the run's field; None
    where there is none. Hydra sweeps no setting of its own: it refused some with its own message,
    exit 1, and others stopped the check of the jobs with an OmegaConf ``AssertionError``."""
    for o in parsed:
        key = o.get_key_element().lstrip("+~")
        if o.is_sweep_override() and key.startswith("hydra."):
            value = o.input_line.split("=", 1)[1]
            field = key[len("hydra.sweeper.params."):] if key.startswith("hydra.sweeper.params.") else ""
            hint = f"{field}={value}" if field else "e.g. model.dropout=0.1,0.3"
            return (f"{o.input_line}: a sweep over Hydra's own settings (hydra.*), which Hydra does not "
                    f"support; give the search space as overrides of the run ({hint}) on the command "
                    f"line, or as hydra.sweeper.params in a search file (docs/sweeps.md)")
    return None


def check_sweep_values(argv: Iterable[str], conf_dir: Path) -> Optional[str]:
    """For a multirun (``-m``, ``hydra.mode=MULTIRUN``, or a config file chosen on the command
    line that sets that mode, as ``hparams_search=…`` do): the first value of its search space —
    on the command line or in ``hydra.sweeper.params`` — that the run refuses, as a message naming
    it and the run's ConfigError; None when every value checked passes or this is no multirun. The
    jobs checked are :func:`_trials`': the first, one key at a time varied, and in a small grid
    every combination, in a larger one every pair of two keys' values. ``argv``: the command line after :func:`attnflow.config.groups.field_overrides`. A
    command line Hydra itself cannot compose is left to Hydra, which reports it."""
    args = [a for a in argv if not a.startswith("-")]
    flagged = bool({"-m", "--multirun"} & set(argv))
    if not flagged and not any(a.lstrip("+").startswith("hydra.mode=") for a in args) \
            and not chooses_multirun_file(args, conf_dir):
        return None  # a single run (or a sweep Hydra refuses in run mode): no second composition
    from hydra import compose, initialize_config_dir
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException
    from hydra.types import RunMode
    from omegaconf.errors import OmegaConfBaseException

    from attnflow.io.console import printing_elsewhere
    from attnflow.data.errors import DataError
    from attnflow.training.distributed import check_devices, check_multirun_strategy
    from attnflow.config.registry import ConfigError
    from attnflow.training.validate import unread_settings

    parser = OverridesParser.create()
    try:
        parsed = parser.parse_overrides(args)
    except HydraException:
        return None
    base = [o.input_line for o in parsed if not o.is_sweep_override()]
    if any(type(o.value()).__name__ == "Glob" for o in parsed if o.is_sweep_override()):
        return None  # glob(): its options are Hydra's to list, once it has loaded the config
    space = {o.get_key_element(): _probe_values(o) for o in parsed if o.is_sweep_override()}
    try:
        with initialize_config_dir(config_dir=str(conf_dir), version_base="1.3"):
            try:
                cfg = compose("train", overrides=base, return_hydra_config=True)
            except HydraException as err:
                unknown = _unknown_plugin_field(err)
                if unknown:
                    return unknown
                raise
            multirun = flagged or cfg.hydra.mode == RunMode.MULTIRUN
            if not multirun:
                return None
            over_hydra = _hydra_sweep(parsed)
            if over_hydra:
                return over_hydra
            for key, spec in (cfg.hydra.sweeper.get("params") or {}).items():
                if key not in space:
                    space[key] = _probe_values(parser.parse_override(f"{key}={spec}"))
            taken = sweep_folder_taken(cfg.hydra, space)
            if taken:
                return taken
            trials = _trials(space)
            launcher = str(cfg.hydra.launcher.get("_target_", ""))
            here = "submitit" not in launcher.lower() or "Local" in launcher  # jobs run on this machine
            # submitit's jobs (local ones too) print to log files: the progress bar they draw is
            # not this terminal's (callbacks.progress_bar=auto), nor what it reads
            files = "submitit" in launcher.lower()
            unread_everywhere = None  # {key: (override, refusal)}: typed, and read by no job checked
            for i, (key, job) in enumerate(trials):  # the first job, one key at a time, the rest
                trial = [f"{k}={v}" for k, v in job.items()]
                try:
                    composed = compose("train", overrides=[*base, *trial], return_hydra_config=True)
                    with printing_elsewhere() if files else contextlib.nullcontext():
                        resolved, unread = unread_settings(composed)
                    unread_everywhere = unread if unread_everywhere is None else {
                        p: m for p, m in unread_everywhere.items() if p in unread}
                    if i == 0:  # the sweep as a whole, once its first job's config is known
                        try:
                            check_sweeper(cfg.hydra.sweeper, parsed, space, resolved)
                            other = _other_study_command(cfg.hydra, args, space)
                            if other:
                                raise ConfigError(other)
                            if here:  # ddp re-runs the sweep in every rank (a cluster's scheduler
                                check_multirun_strategy(resolved.get("trainer"), True)  # makes them)
                        except ConfigError as err:
                            return f"{err} (no job was started)"
                    try:
                        check_optimized_metric(resolved)
                        check_direction(resolved, cfg.hydra.sweeper)
                    except ConfigError as err:
                        if i == 0:  # the sweep's own setting: not the fault of the first job's values
                            return f"{err} (no job was started)"
                        raise
                    if here:  # a cluster's jobs run on its GPU nodes, not on this login node
                        check_devices(resolved.get("trainer"))
                except (ConfigError, DataError, HydraException) as err:
                    # HydraException: a value Hydra cannot compose (an unknown group option),
                    # which Hydra would report only after making the sweep folder
                    shown = " ".join(t.lstrip("+") for t in trial)
                    what = (f"the sweep's {key.lstrip('+')}={job[key]} is refused" if key else
                            f"the sweep's first job ({shown}) is refused" if i == 0 and trial else
                            f"the sweep's job {shown} is refused" if trial else
                            "the sweep's one job is refused")
                    why = (re.sub(r"\s*\n\s*", " ", str(err).split("Config search path")[0].strip())
                           if isinstance(err, HydraException) else err)  # Hydra's lines as one
                    return f"{what}, so no job was started: {why}"
            for shown, message in (unread_everywhere or {}).values():  # unread in every job checked
                return f"{shown} is read by none of the sweep's jobs, so no job was started: {message}"
    except (HydraException, OmegaConfBaseException):
        return None
    return None
