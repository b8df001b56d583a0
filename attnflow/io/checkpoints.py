"""Finding and reading the checkpoint of a run, for the command-line tools and resume.

A run directory holds ``metrics.json`` naming the best checkpoint and ``checkpoints/*.ckpt``; the
recorded path is absolute, so it is looked up by file name under the run's own ``checkpoints/``
(a moved or copied run reads its own file). Checkpoints are read with ``weights_only=True``.
Every failure is a :class:`CheckpointError` saying what was expected (the tools exit with 2).
Each checkpoint attnflow writes has a digest beside it (``<name>.sha256``, as ``sha256sum``
writes it), checked on every read: a damaged file is refused, not trained or evaluated on.
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
import pickle
import warnings
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, NamedTuple, Optional, Set, Tuple, TypeVar

import yaml

from attnflow.io.console import AttnflowWarning
from attnflow.io.text import listed

if TYPE_CHECKING:  # torch is imported only where a checkpoint is read or a device checked
    import torch


class CheckpointError(ValueError):
    """A run directory or checkpoint that cannot be used; the message says what was expected."""


DIGEST_SUFFIX = ".sha256"
WANDB_ID_KEY = "attnflow_wandb_run_id"  # a checkpoint's W&B run id, which its resume logs to
_UNCHECKED: Set[Path] = set()  # checkpoints without a digest, warned about once each


def digest_path(path: Path | str) -> Path:
    """The digest file of the checkpoint ``path``: ``<name>.sha256`` beside it."""
    path = Path(path)
    return path.with_name(path.name + DIGEST_SUFFIX)


def digest_line(hexdigest: str, path: Path | str) -> str:
    """The text of a digest file, as ``sha256sum`` writes it (``sha256sum -c`` checks it)."""
    return f"{hexdigest}  {Path(path).name}\n"


def check_digest(path: Path, data: bytes) -> None:
    """A :class:`CheckpointError` naming ``path`` where ``data``, its bytes, differ from its
    digest; one warning (once per file) where it has none (written before attnflow wrote digests)."""
    side = digest_path(path)
    try:
        recorded = (side.read_text(encoding="ascii", errors="replace").split() or [""])[0]
    except FileNotFoundError:
        if path.resolve() not in _UNCHECKED:
            _UNCHECKED.add(path.resolve())
            _warn(f"{path} has no digest ({side.name}; written by an older attnflow?): read "
                  f"without checking its bytes")
        return
    except OSError as err:
        raise CheckpointError(f"{path}: cannot read its digest {side}: {err.strerror}") from None
    if recorded.lower() != hashlib.sha256(data).hexdigest():
        cut = (" (corrupt or truncated: cut short by a kill or a full disk?)"
               if _cut_short(path, deep=False) else "")
        raise CheckpointError(f"{path}: its bytes do not match its digest ({side.name}): the file "
                              f"is damaged{cut}")


def find_checkpoint(path: Path | str) -> Tuple[Path, Path]:
    """(checkpoint, run directory) for a run directory or a checkpoint file: the best checkpoint
    of ``metrics.json`` if there is one, else ``last.ckpt``, else the first ``*.ckpt``."""
    path = Path(path)
    if path.is_file():
        return path, path.parent.parent if path.parent.name == "checkpoints" else path.parent
    if not path.is_dir():
        raise CheckpointError(f"no such run directory or checkpoint: {path}")
    held = runs_inside(path)
    if held:
        raise CheckpointError(held)
    ckpts = path / "checkpoints"
    best = (final_metrics(path) or {}).get("best_checkpoint")  # (none, or damaged: last.ckpt)
    if isinstance(best, str) and best and (ckpts / Path(best).name).is_file():
        return ckpts / Path(best).name, path
    if isinstance(best, str) and best:
        _warn(f"{path / 'metrics.json'} names the best checkpoint {best}, which {ckpts} does not "
              f"hold; the run's own last.ckpt (else its first checkpoint) is used")
    for cand in [ckpts / "last.ckpt", *sorted(ckpts.glob("*.ckpt"))]:
        if cand.is_file():
            return cand, path
    raise CheckpointError(f"{path} is a directory without checkpoints (expected {ckpts}/*.ckpt "
                          f"from attnflow-train)")


def final_metrics(run: Path | str) -> Optional[Dict[str, Any]]:
    """The run's ``metrics.json``, written as it ended; None where it has none (or a damaged one)."""
    try:
        found = json.loads((Path(run) / "metrics.json").read_text())
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) else None


def run_experiment(run_dir: Path) -> Optional[str]:
    """The experiment a run was composed with (None: the default)."""
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


def runs_inside(path: Path) -> Optional[str]:
    """Why ``path`` is no run directory but a folder of runs (a sweep's), naming them; else None."""
    if (path / "config.yaml").is_file() or (path / "checkpoints").is_dir():
        return None
    runs = sorted((c for c in path.iterdir() if c.is_dir() and ((c / "config.yaml").is_file()
                                                              or (c / "checkpoints").is_dir())),
                  key=lambda c: (not c.name.isdigit(), int(c.name) if c.name.isdigit() else 0, c.name))
    if not runs:
        return None
    kind = "a multirun (sweep) folder" if (path / "multirun.yaml").is_file() else "a folder of runs"
    return (f"{path} is {kind}, not a run directory: name one of its runs ({listed(runs, 4)}); "
            f"attnflow-report {path} ranks them")


def read_config_yaml(path: Path) -> Any:
    """The parsed ``path`` (a run's config.yaml); invalid YAML is a :class:`CheckpointError`."""
    try:
        return yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        raise CheckpointError(f"{path} is not valid YAML: {str(err).splitlines()[0]}") from None


def _not_torch_file(path: Path) -> Optional[str]:
    """Why ``path`` cannot be a checkpoint, from its first bytes: empty, or neither a zip archive
    (torch's format) nor a pickle; None for one that may be."""
    if path.stat().st_size == 0:
        return "the file is empty"
    with open(path, "rb") as f:
        head = f.read(16)
    if head[:2] != b"PK" and head[:1] != b"\x80":
        return (f"it is not a checkpoint: a .ckpt of attnflow-train is a torch archive (a zip), and "
                f"this file starts with {head.decode('utf-8', 'replace')!r}; name a run directory "
                f"or a .ckpt file in its checkpoints/")
    return None


def _cut_short(path: Path, deep: bool = True) -> bool:
    """Whether ``path`` starts as a zip archive (torch's format) but does not read as one (its
    end, where a zip's index is, is missing; ``deep``: or a member's bytes fail their CRC)."""
    with open(path, "rb") as f:
        if f.read(2) != b"PK":
            return False
    try:
        with zipfile.ZipFile(path) as z:
            return deep and z.testzip() is not None
    except (zipfile.BadZipFile, OSError, EOFError):
        return True


def why_unreadable(path: Path, err: Exception) -> str:
    text = str(err).splitlines()[0] if str(err) else type(err).__name__
    if not_torch := _not_torch_file(path):
        return not_torch
    if isinstance(err, EOFError) or _cut_short(path):
        return f"the file is corrupt or truncated (cut short by a kill or a full disk?): {text}"
    if isinstance(err, pickle.UnpicklingError):
        return ("it holds objects other than tensors and plain containers, which are not unpickled "
                f"(weights_only=True): {text}")
    return f"{type(err).__name__}: {text}"


def read_checkpoint(path: Path | str, device: Any = "cpu", lightning: bool = True) -> Dict[str, Any]:
    """The checkpoint's dictionary, read with ``weights_only=True``: the one reader of
    checkpoints. Its bytes are read once, checked against its digest (:func:`check_digest`) and
    loaded from memory. ``lightning``: it must be a Lightning checkpoint (a ``state_dict``
    entry)."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"no such checkpoint file: {path}")
    if not_torch := _not_torch_file(path):  # refused before torch's import (seconds)
        raise CheckpointError(f"cannot read checkpoint {path}: {not_torch}")
    data = path.read_bytes()
    check_digest(path, data)
    import torch

    try:
        ckpt = torch.load(io.BytesIO(data), map_location=device, weights_only=True)
    except Exception as err:  # noqa: BLE001  (any unreadable or unsafe file)
        raise CheckpointError(f"cannot read checkpoint {path}: {why_unreadable(path, err)}") from None
    if lightning and (not isinstance(ckpt, dict) or "state_dict" not in ckpt):
        raise CheckpointError(f"{path} is not an attnflow/Lightning checkpoint (no state_dict)")
    return ckpt


def newest_intact(folder: Path, but: Path) -> Optional[Tuple[Path, Dict[str, Any]]]:
    """(path, dictionary) of the newest training state in ``folder`` other than ``but`` that
    reads whole (by modification time): what a resume falls back to where ``but`` (its
    ``last.ckpt``) is damaged; None where there is none."""
    files = sorted((p for p in folder.glob("*.ckpt") if p.name != but.name and p.is_file()),
                   key=lambda p: (p.stat().st_mtime_ns, p.name), reverse=True)
    for path in files:
        try:
            ckpt = read_checkpoint(path)
        except CheckpointError:
            continue
        state = isinstance(ckpt.get("attnflow_config"), dict) and "loops" in ckpt
        if state and "attnflow_average" not in ckpt:  # (averaged.ckpt: no training state)
            return path, ckpt
    return None


F = TypeVar("F", bound=Callable[..., Any])


def no_grad(fn: F) -> F:
    """``@torch.no_grad()`` with torch imported at the first call (the console tools import the
    modules that use it before their arguments are checked)."""
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
    """The CLIs' ``--device`` (``cpu``, ``cuda``, ``cuda:1``, ``gpu``, ``mps``) as a torch device
    this machine has, else a :class:`CheckpointError` about the device."""
    name = "cuda" if str(device).lower() == "gpu" else str(device)
    if name == "cpu":  # no torch to import (seconds) before the path is checked
        return name
    import torch

    try:
        dev = torch.device(name)
    except (RuntimeError, ValueError):
        dev = None
    if dev is None or dev.type not in ("cpu", "cuda", "mps"):
        raise CheckpointError(f"--device {device} is not a device: use cpu, cuda (or gpu), cuda:N "
                              f"or mps")
    cuda = dev.type == "cuda"
    count = (torch.cuda.device_count() if cuda
             else int(dev.type == "cpu" or torch.backends.mps.is_available()))
    if (dev.index or 0) >= count:
        raise CheckpointError(f"--device {device}: this machine shows {count} "
                              f"{'CUDA GPU' if cuda else dev.type + ' device'}(s) (torch "
                              f"{torch.__version__}); use --device cpu")
    return name


def load_run(target: Path | str, device: str = "cpu") -> Run:
    """The run of a run directory or checkpoint file, with its config (the checkpoint's or the
    run's ``config.yaml``)."""
    device = torch_device(device)
    ckpt_path, run_dir = find_checkpoint(target)
    ckpt = read_checkpoint(ckpt_path, device)
    cfg = ckpt.get("attnflow_config") or None
    if not cfg and (run_dir / "config.yaml").is_file():
        cfg = read_config_yaml(run_dir / "config.yaml")
    if not isinstance(cfg, dict) or not all(isinstance(cfg.get(k), dict) for k in ("data", "model")):
        raise CheckpointError(f"{ckpt_path} is not an attnflow run: neither its 'attnflow_config' "
                              f"nor {run_dir / 'config.yaml'} is a run config with the mappings "
                              f"'data' and 'model'")
    elif (run_dir / "config.yaml").is_file():
        _warn_edited(run_dir / "config.yaml", cfg)
    if cfg["model"].get("init_from"):  # the run's own checkpoint holds every weight
        cfg["model"] = {**cfg["model"], "init_from": None}
    return Run(ckpt_path, run_dir, ckpt, cfg)


def _warn(message: str) -> None:
    warnings.warn(message, AttnflowWarning, stacklevel=3)


def _warn_edited(path: Path, cfg: Dict[str, Any]) -> None:
    """One warning where ``path`` (config.yaml) says other than the checkpoint's config of the
    data, model or task (which no resume changes: an edit by hand)."""
    try:
        saved = read_config_yaml(path)
    except CheckpointError:
        saved = None
    if not isinstance(saved, dict):
        return
    differ = [k for k in ("data", "model", "task") if saved.get(k) != cfg.get(k)]
    if differ:
        _warn(f"{path} differs from the checkpoint's config in {', '.join(differ)} (edited by "
              f"hand?): the checkpoint's config is used (data.* and task.* changes: as overrides)")


def run_artifacts(run: Run) -> Dict[str, Any]:
    """What prediction needs besides weights (a vocabulary, the classes): ``<run dir>/vocab.json``,
    else the checkpoint's ``attnflow_artifacts``, else {}."""
    path = run.run_dir / "vocab.json"
    if path.is_file():
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except ValueError as err:
            raise CheckpointError(f"{path} is not valid JSON ({err})") from None
    return dict(run.ckpt.get("attnflow_artifacts") or {})


def load_weights(module: torch.nn.Module, state_dict: Dict[str, Any], prefix: str = "",
                 what: str = "the model") -> None:
    """Load the entries of ``state_dict`` under ``prefix`` into ``module``, or raise a
    :class:`CheckpointError` naming the first missing, unexpected or differently shaped weight."""
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


# callbacks.average keeps epochs' weights in <run dir>/checkpoints/avg/, listed in kept.json,
# and writes checkpoints/averaged.ckpt
AVG_DIR = "avg"
INDEX = "kept.json"
AVERAGED = "averaged.ckpt"


def read_index(run_dir: Path | str) -> Optional[Dict[str, Any]]:
    """The kept-epochs index of the run ``run_dir``; None without one."""
    path = Path(run_dir) / "checkpoints" / AVG_DIR / INDEX
    return json.loads(path.read_text()) if path.is_file() else None
