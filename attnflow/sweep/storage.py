"""Where an Optuna sweep keeps its study: the storage spec of ``hydra.sweeper.storage`` and the
storage opened from it, for the sweeper, its trials and ``attnflow-report`` alike."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any, Optional, Tuple

from attnflow.config.registry import ConfigError
from attnflow.config.secrets import mask_url


def storage_spec(storage: Optional[str], sweep_dir: Path | str) -> str:
    """``hydra.sweeper.storage`` with null resolved to the sweep folder's ``optuna.db``; a journal
    path made absolute (each trial opens it from its own working directory)."""
    if not storage:
        return f"sqlite:///{Path(sweep_dir).resolve() / 'optuna.db'}"
    if str(storage).endswith(".journal"):
        return str(Path(storage).resolve())
    return str(storage)


def open_storage(spec: str, heartbeat: Optional[Tuple[int, int]] = None, on_stale: Any = None) -> Any:
    """The Optuna storage of a :func:`storage_spec` (the sqlite file's folder made); an RDB one
    with ``heartbeat`` = (interval, grace period) in seconds finds trials whose heartbeat stopped,
    and calls ``on_stale(study, trial)`` for each it fails."""
    import optuna  # (the sweep extra)
    from sqlalchemy.exc import SQLAlchemyError  # (Optuna's)

    if spec.endswith(".journal"):
        Path(spec).parent.mkdir(parents=True, exist_ok=True)
        return optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(spec))
    if spec.startswith("sqlite:///"):
        Path(spec[len("sqlite:///"):]).parent.mkdir(parents=True, exist_ok=True)
        logging.getLogger("alembic").setLevel(logging.WARNING)  # "Context impl SQLiteImpl" at INFO
    beats = dict(heartbeat_interval=heartbeat[0], grace_period=heartbeat[1],
                 heartbeat_stale_trial_callback=on_stale) if heartbeat else {}
    if spec.startswith("sqlite"):  # several processes write one file: wait for its lock
        beats["engine_kwargs"] = {"connect_args": {"timeout": 120}}
    for attempt in range(6):  # workers started together on a new database each create its tables
        try:  # (PostgreSQL: "duplicate key … alembic_version"): the one that loses tries again
            return optuna.storages.RDBStorage(spec, **beats)
        except SQLAlchemyError:
            if attempt == 5:
                raise
            time.sleep(0.5 * (attempt + 1))
        except RuntimeError as err:  # e.g. a study stored by an older Optuna: its message says the command
            raise ConfigError(f"hydra.sweeper.storage={mask_url(spec)}: {mask_url(str(err))}") from None
