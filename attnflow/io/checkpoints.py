"""Finding and reading the checkpoint of a run, for the command-line tools (eval, translate,
predict) and resume.

A run directory (``outputs/<date>/<time>/``) holds ``metrics.json`` naming the best checkpoint and
``checkpoints/*.ckpt``. The path in ``metrics.json`` is absolute, so a run directory that was moved
or copied is looked up by the checkpoint's file name under its own ``checkpoints/``.
Checkpoints are read with ``torch.load(weights_only=True)``: attnflow stores only tensors and plain
containers in them, so a file that needs unpickling of arbitrary objects is refused.

:func:`load_run` gives a run's checkpoint with its config (``attnflow_config``, else the run's
``config.yaml``); :func:`run_artifacts` what prediction needs besides
weights; :func:`load_weights` loads them into a rebuilt model. Every failure — a missing path, a
sweep folder or a folder of runs (:func:`runs_inside` names them), an empty, truncated or corrupt
file, a file that is no checkpoint (a ``config.yaml``), a checkpoint of another program or another
model — is a
:class:`CheckpointError` whose message says which and what was expected (the tools print it and
exit with status 2).
"""

from __future__ import annotations

import functools
import json
import pickle
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, NamedTuple, Optional, Tuple, TypeVar

from attnflow.io.text import listed

if TYPE_CHECKING:  # torch is imported where a checkpoint is read or a device checked: the tools
    import torch   # refuse a path that is no run in a second, before torch's import


class CheckpointError(ValueError):
    """A run directory or checkpoint that cannot be used; the message says what was expected."""


def find_checkpoint(path: Path | str) -> Tuple[Path, Path]:
    """(checkpoint, run directory) for a run directory or a checkpoint file: the best checkpoint
    of ``metrics.json`` if there is one, else ``last.ckpt``, else the first ``*.ckpt``."""
    path = Path(path)
    if path.is_file():
        run_dir = path.parent.parent if path.parent.name == "checkpoints" else path.parent
        return path, run_dir
    if not path.is_dir():
        raise CheckpointError(f"no such run directory or checkpoint: {path}")
    held = runs_inside(path)
    if held:
        raise CheckpointError(held)
    ckpts = path / "checkpoints"
    metrics = path / "metrics.json"
    if metrics.is_file():
        try:
            best = json.loads(metrics.read_text()).get("best_checkpoint")
        except (json.JSONDecodeError, UnicodeDecodeError, AttributeError):
            best = None  # a damaged metrics.json: fall back to last.ckpt
        # by its name in this run's own checkpoints/ (the recorded path is absolute: a moved or
        # copied run directory would else read the original run's file)
        if isinstance(best, str) and best and (ckpts / Path(best).name).is_file():
            return ckpts / Path(best).name, path
    for cand in [ckpts / "last.ckpt", *sorted(ckpts.glob("*.ckpt"))]:
        if cand.is_file():
            return cand, path
    why = (" — the run had callbacks.checkpoint=null, which saves none"
           if _checkpoints_off(path / "config.yaml") else "")
    raise CheckpointError(f"{path} is a directory without checkpoints (expected {ckpts}/*.ckpt "
                          f"from attnflow-train){why}")


def runs_inside(path: Path) -> Optional[str]:
    """Why the folder ``path``, given where one run directory is expected, is not one but holds
    runs — a multirun (sweep) folder (``multirun.yaml``, one folder per job) or a folder of runs
    (``outputs/<date>/``) — naming them; None for a folder that is a run or holds none."""
    if (path / "config.yaml").is_file() or (path / "checkpoints").is_dir():
        return None
    runs = sorted((c for c in path.iterdir() if c.is_dir() and ((c / "config.yaml").is_file()
                                                              or (c / "checkpoints").is_dir())),
                  key=lambda c: (not c.name.isdigit(), int(c.name) if c.name.isdigit() else 0, c.name))
    sweep = (path / "multirun.yaml").is_file()
    if not runs:
        return (f"{path} is a multirun (sweep) folder that holds no job's run yet, not a run "
                f"directory") if sweep else None
    return (f"{path} is {'a multirun (sweep) folder' if sweep else 'a folder of runs'}, not a run "
            f"directory: name one of its runs ({listed(runs, 4)}); attnflow-report {path} ranks "
            f"them")


def _checkpoints_off(config: Path) -> bool:
    """Whether the run config ``config`` (a run directory's config.yaml) turned checkpoints off."""
    try:
        cfg = read_config_yaml(config)
    except (CheckpointError, OSError, UnicodeDecodeError):
        return False  # no readable config: nothing to add to the message
    callbacks = cfg.get("callbacks") if isinstance(cfg, dict) else None
    return isinstance(callbacks, dict) and "checkpoint" in callbacks and callbacks["checkpoint"] is None


def read_config_yaml(path: Path) -> Any:
    """The parsed ``path`` (a run's config.yaml); invalid YAML is a :class:`CheckpointError`."""
    import yaml

    try:
        return yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        raise CheckpointError(f"{path} is not valid YAML: {str(err).splitlines()[0]}") from None


def _not_torch_file(path: Path) -> Optional[str]:
    """Why the file ``path`` cannot be a checkpoint, seen from its first bytes without torch (an
    empty file; one that is neither a zip archive nor a pickle); None for one that may be."""
    if path.stat().st_size == 0:
        return "the file is empty"
    with open(path, "rb") as f:
        head = f.read(16)
    # torch's format since 1.6 is a zip archive, its older one a pickle (protocol 2+); anything
    # else is no checkpoint (a config.yaml or metrics.json named by mistake?)
    if head[:2] != b"PK" and head[:1] != b"\x80":
        shown = head.decode("utf-8", "replace")
        return (f"it is not a checkpoint: a .ckpt of attnflow-train is a torch archive (a zip), and "
                f"this file starts with {shown!r}; name a run directory or a .ckpt file in its "
                f"checkpoints/")
    return None


def why_unreadable(path: Path, err: Exception) -> str:
    """What went wrong reading a checkpoint, in words (torch's own messages name neither)."""
    text = str(err).splitlines()[0] if str(err) else ""
    not_torch = _not_torch_file(path)
    if not_torch:
        return not_torch
    cut = "the file is corrupt or truncated (a checkpoint cut short by a kill or a full disk?)"
    with open(path, "rb") as f:
        zipped = f.read(2) == b"PK"
    if zipped:
        import zipfile

        try:
            with zipfile.ZipFile(path) as z:
                if z.testzip() is not None:
                    return cut
        except (zipfile.BadZipFile, OSError, EOFError):
            return cut
    if isinstance(err, EOFError) or "truncated" in text or "central directory" in text:
        return f"{cut}: {text or type(err).__name__}"
    if isinstance(err, pickle.UnpicklingError) or "weights_only" in text.lower():
        return ("it holds objects other than tensors and plain containers, which are not unpickled "
                f"(weights_only=True): {text}")
    return f"{type(err).__name__}: {text}"


def read_checkpoint(path: Path | str, device: Any = "cpu", mmap: bool = False,
                    lightning: bool = True) -> Dict[str, Any]:
    """The checkpoint's dictionary, read with ``weights_only=True`` (no arbitrary unpickling), or a
    :class:`CheckpointError` saying what is wrong with the file. ``mmap``: map the tensors instead
    of reading them; ``lightning``: it must be a Lightning checkpoint (a ``state_dict`` entry)."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"no such checkpoint file: {path}")
    not_torch = _not_torch_file(path)  # refused before torch's import (seconds)
    if not_torch:
        raise CheckpointError(f"cannot read checkpoint {path}: {not_torch}")
    import torch

    try:
        ckpt = torch.load(path, map_location=device, weights_only=True, mmap=mmap)
    except Exception as err:  # noqa: BLE001  (any unreadable or unsafe file)
        raise CheckpointError(f"cannot read checkpoint {path}: {why_unreadable(path, err)}") from None
    if lightning and (not isinstance(ckpt, dict) or "state_dict" not in ckpt):
        raise CheckpointError(f"{path} is not an attnflow/Lightning checkpoint (no state_dict)")
    return ckpt


F = TypeVar("F", bound=Callable[..., Any])


def no_grad(fn: F) -> F:
    """``fn`` run under ``torch.no_grad()``, as the decorator ``@torch.no_grad()`` does, with torch
    imported at its first call: the console tools import the modules that use it (a second)
    before their arguments are checked, and torch (seconds) only for the work."""
    @functools.wraps(fn)
    def without_grad(*args: Any, **kwargs: Any) -> Any:
        import torch

        with torch.no_grad():
            return fn(*args, **kwargs)
    return without_grad  # type: ignore[return-value]


class Run(NamedTuple):
    """A trained run as the command-line tools see it."""

    checkpoint: Path      # the checkpoint file used
    run_dir: Path         # the run directory (tokenizer/, vocab.json, eval/)
    ckpt: Dict[str, Any]  # the checkpoint's dictionary
    config: Dict[str, Any]  # the resolved run config


def torch_device(device: str) -> str:
    """The CLIs' ``--device`` (``cpu``, ``cuda``, ``cuda:1``, ``gpu`` as Lightning names CUDA,
    ``mps``) as a torch device this machine has; else a :class:`CheckpointError` about the device
    (not, later, about the checkpoint that could not be mapped to it)."""
    name = "cuda" if str(device).lower() == "gpu" else str(device)
    if name == "cpu":  # every machine has it: no torch to import (seconds) before the path is checked
        return name
    import torch

    try:
        dev = torch.device(name)
    except (RuntimeError, ValueError):
        raise CheckpointError(f"--device {device} is not a device: use cpu, cuda (or gpu), cuda:N "
                              f"or mps") from None
    count = torch.cuda.device_count() if dev.type == "cuda" else 0
    if dev.type == "cuda" and (count == 0 or (dev.index or 0) >= count):
        raise CheckpointError(f"--device {device}: this machine shows {count} CUDA GPU(s) (torch "
                              f"{torch.__version__}); use --device cpu")
    if dev.type == "mps" and not torch.backends.mps.is_available():
        raise CheckpointError(f"--device {device}: Apple's MPS is not available here; use --device cpu")
    if dev.type not in ("cpu", "cuda", "mps"):
        raise CheckpointError(f"--device {device}: use cpu, cuda (or gpu), cuda:N or mps")
    return name


def load_run(target: Path | str, device: str = "cpu") -> Run:
    """The run of a run directory or checkpoint file, with its config: the checkpoint's
    ``attnflow_config``, else the run directory's ``config.yaml``. Anything else (a missing
    path, an unreadable file, a checkpoint of another program, a ``device`` this machine lacks)
    is a :class:`CheckpointError`."""
    device = torch_device(device)
    ckpt_path, run_dir = find_checkpoint(target)
    ckpt = read_checkpoint(ckpt_path, device)
    cfg = ckpt.get("attnflow_config") or None
    if not cfg and (run_dir / "config.yaml").is_file():
        cfg = read_config_yaml(run_dir / "config.yaml")
    if not cfg:
        raise CheckpointError(
            f"{ckpt_path} is not an attnflow run: the checkpoint carries no 'attnflow_config' (every "
            f"checkpoint of attnflow-train does) and {run_dir / 'config.yaml'} is missing")
    if not isinstance(cfg, dict) or not all(isinstance(cfg.get(k), dict) for k in ("data", "model")):
        source = ("the checkpoint's 'attnflow_config'" if ckpt.get("attnflow_config")
                  else str(run_dir / "config.yaml"))
        raise CheckpointError(f"{source} is not an attnflow run config: it needs the mappings "
                              f"'data' and 'model' (the config attnflow-train resolved)")
    if cfg["model"].get("init_from"):  # the run's own checkpoint holds the weights: a fine-tuned
        cfg["model"] = {**cfg["model"], "init_from": None}  # run needs no pretraining run to load
    return Run(ckpt_path, run_dir, ckpt, cfg)


def run_artifacts(run: Run) -> Dict[str, Any]:
    """What prediction and evaluation need besides weights (a document vocabulary and its
    classes): ``<run dir>/vocab.json``, else the checkpoint's ``attnflow_artifacts``, else {}."""
    path = run.run_dir / "vocab.json"
    if path.is_file():
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise CheckpointError(f"{path} is not valid JSON ({err}); it is written by "
                                  f"attnflow-train at the start of the run") from None
    return dict(run.ckpt.get("attnflow_artifacts") or {})


def load_weights(module: torch.nn.Module, state_dict: Dict[str, Any], prefix: str = "",
                 what: str = "the model") -> None:
    """Load the entries of ``state_dict`` under ``prefix`` into ``module``, or raise a
    :class:`CheckpointError` naming the first missing, unexpected or differently shaped weight
    (instead of torch's list of every mismatch) — e.g. a GAT evaluated on a graph with another
    feature size, or a checkpoint of another model."""
    state = {k[len(prefix):]: v for k, v in state_dict.items() if k.startswith(prefix)}
    own = module.state_dict()
    missing = [k for k in own if k not in state]
    unexpected = [k for k in state if k not in own]
    if missing or unexpected:
        parts = ([f"{len(missing)} weights missing from the checkpoint (e.g. {prefix}{missing[0]})"]
                 if missing else []) + (
                [f"{len(unexpected)} weights in the checkpoint that {what} has no place for (e.g. "
                 f"{prefix}{unexpected[0]})"] if unexpected else [])
        raise CheckpointError(f"the checkpoint's weights are not those of {what}: "
                              f"{'; '.join(parts)} (a checkpoint of another model?)")
    for k, v in own.items():
        if tuple(state[k].shape) != tuple(v.shape):
            raise CheckpointError(
                f"the checkpoint's weights do not fit {what}: {prefix}{k} is "
                f"{tuple(state[k].shape)} in the checkpoint but {tuple(v.shape)} here")
    module.load_state_dict(state)


# callbacks.average (attnflow.training.averaging) keeps epochs' weights in <run dir>/checkpoints/avg/, listed
# in its kept.json, and writes checkpoints/averaged.ckpt
AVG_DIR = "avg"
INDEX = "kept.json"
AVERAGED = "averaged.ckpt"


def read_index(run_dir: Path | str) -> Optional[Dict[str, Any]]:
    """The kept-epochs index (``checkpoints/avg/kept.json``) of the run ``run_dir``; None without
    one (a run trained without ``callbacks.average``)."""
    path = Path(run_dir) / "checkpoints" / AVG_DIR / INDEX
    return json.loads(path.read_text()) if path.is_file() else None
