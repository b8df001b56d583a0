"""A trained run opened and rebuilt: its config as the work uses it, what it works on, and its
model (and task) built from the registries with the checkpoint's weights."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Optional

from attnflow.config.registry import DATA, MODELS, TASKS
from attnflow.config.secrets import resolve_env
from attnflow.io.checkpoints import Run, load_run, load_weights


class InferenceError(ValueError):
    """A problem the user can fix; printed as one line."""


def open_run(target: Path | str, device: str = "cpu") -> Run:
    """The run at ``target`` with its config as the work uses it: a field recorded as
    ``${oc.env:…}`` resolved again (an unset variable: a :class:`ConfigError` naming it)."""
    run = load_run(target, device)
    return run._replace(config=resolve_env(run.config))


def run_interface(run: Run) -> Optional[str]:
    """What the run works on ('documents', 'graph', 'seq2seq'), from its model (else its data)."""
    for group, registry in (("model", MODELS), ("data", DATA)):
        name = (run.config.get(group) or {}).get("name")
        kind = name in registry.names() and registry.get(name).interface
        if kind:
            return kind
    return None


def data_module(run: Run, config: Optional[Dict[str, Any]] = None):
    """The data module of the run's config (or ``config``), ``${oc.env:…}`` resolved."""
    return DATA.build(resolve_env(config or run.config)["data"], path="data")


def rebuild(run: Run, model_context: Dict[str, Any], detail: str = "",
            task_context: Optional[Dict[str, Any]] = None, device: Optional[str] = None,
            config: Optional[Dict[str, Any]] = None):
    """The run's model built from its config (or ``config``; ``${oc.env:…}`` resolved) with
    ``model_context``, with ``task_context`` inside its task; the checkpoint's weights loaded (a
    mismatch names ``model '<name>'`` and ``detail``); in eval mode, on ``device`` if given."""
    used = resolve_env(config or run.config)
    model = MODELS.build(used["model"], path="model", **model_context)
    task = None if task_context is None else TASKS.build(used["task"], model, path="task", **task_context)
    load_weights(model, run.ckpt["state_dict"], "model.", f"model '{used['model'].get('name')}'{detail}")
    out = (model if task is None else task).eval()
    return out.to(device) if device else out
