"""attnflow-eval: evaluate a trained run on a split, or on another data set of the same kind.

    attnflow-eval RUN                                  # its test split (val for runs without one)
    attnflow-eval RUN data.test=test_2017_flickr       # Multi30k: another test set
    attnflow-eval RUN data.name=planetoid data.dataset=Cora   # another graph data module
    attnflow-eval RUN/checkpoints/last.ckpt task.beam_size=8 -o metrics.json

RUN is a run directory (its best checkpoint by ``metrics.json``, else ``last.ckpt``) or a
checkpoint file. Nothing is trained: data, model and task are rebuilt from the config stored in the
checkpoint with the overrides applied, and Lightning's ``Trainer.validate`` or ``Trainer.test``
computes the task's metrics. Of the training data only what the run saved is read (tokenizers,
vocabulary); ``data.name`` picks another data module of the same kind (fields from
``conf/data/<name>.yaml``). Overrides: ``split=val|test``, ``data.<field>``, ``task.<field>``,
``seed`` and the ``trainer.*`` fields of :data:`TRAINER_FIELDS`; an unknown one is an error.

The metrics are printed and written as JSON to ``<run dir>/eval/<split>-<YYYYmmdd-HHMMSS>.json``
or ``-o FILE``; an existing file is never overwritten, and a second attnflow-eval writing the
same ``-o FILE`` is refused at once (``.FILE.lock`` beside it), not after its work.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
import tempfile
import time
import warnings
from datetime import datetime
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from omegaconf import OmegaConf
from rich.console import Console
from rich.table import Table

from attnflow import config_dir
from attnflow.config.overrides import parsed
from attnflow.config.registry import DATA, MODELS, TASKS, AttnflowWarning, ConfigError, suggest
from attnflow.config.secrets import resolve_env
from attnflow.io.checkpoints import CheckpointError, Run, load_run, load_weights, run_artifacts
from attnflow.io.console import plain_warnings
from attnflow.io.text import check_folder, check_new_outputs, path_arg
from attnflow.training.onednn import bound_primitive_cache
from attnflow.training.runlock import writing

TRAINER_FIELDS = ("accelerator", "devices", "precision", "limit_val_batches", "limit_test_batches")
SPLITS = ("val", "test")
USAGE = ("split=val|test, data.<field>, task.<field>, seed, trainer." + "|".join(TRAINER_FIELDS))


def parse_overrides(items: List[str]) -> List[Tuple[str, Any]]:
    """``key=value`` strings as (key, value as Hydra parses it) pairs, in order."""
    out, given = [], {}
    for item, override in parsed(items):
        if override is None or override.is_delete() or "=" not in item:
            raise ConfigError(f"'{item}' is not an override: write key=value ({USAGE})")
        key = override.key_or_group
        if key in given:
            raise ConfigError(f"{key} is given twice ({given[key]}, {item}): give it once")
        given[key] = item
        out.append((key, override.value()))
    return out


def _data_preset(name: str, run_cfg: Dict[str, Any]) -> Dict[str, Any]:
    """The fields of ``conf/data/<name>.yaml``, resolved against the run's ``paths`` and ``seed``."""
    path = config_dir() / "data" / f"{name}.yaml"
    if not path.is_file():
        return {"name": name}
    root = OmegaConf.create({"paths": run_cfg.get("paths") or {}, "seed": run_cfg.get("seed", 1234),
                             "data": OmegaConf.load(path)})
    return OmegaConf.to_container(root, resolve=True)["data"]


def apply_overrides(run: Run, overrides: List[Tuple[str, Any]]) -> Tuple[Dict[str, Any], str, Dict[str, Any]]:
    """(config to evaluate with, split, trainer fields): the run's config with ``overrides``
    applied and validated against the registries."""
    cfg = {k: (dict(v) if isinstance(v, dict) else v) for k, v in run.config.items()}
    split, trainer, keys = None, {}, [k for k, _ in overrides]
    new_name = dict(overrides).get("data.name")
    if new_name is not None and new_name != cfg["data"].get("name"):
        DATA.get(str(new_name), "data")
        cfg["data"] = _data_preset(str(new_name), cfg)
    for key, value in overrides:
        head, _, field = key.partition(".")
        if key == "split":
            if value not in SPLITS:
                raise ConfigError(f"split must be 'val' or 'test', got {value!r}")
            split = value
        elif key == "seed":
            if not isinstance(value, int) or isinstance(value, bool):
                raise ConfigError(f"seed must be an integer, got {value!r}")
            cfg["seed"] = value
        elif head in ("data", "task") and field and "." not in field:
            cfg[head][field] = value
        elif head == "trainer" and field in TRAINER_FIELDS:
            trainer[field] = value
        else:
            known = ["split", "seed", *(f"trainer.{f}" for f in TRAINER_FIELDS)]
            raise ConfigError(f"attnflow-eval has no override '{key}'; overrides: {USAGE}."
                              f"{suggest(key, known)}")
    cfg["data"] = DATA.validate(cfg["data"], "data")
    _check_kinds(cfg)
    cfg["task"] = TASKS.validate(cfg["task"], "task")
    if split is None:  # the test split, unless the run has none and no override names one
        split = "test" if run.config.get("test", True) or any(
            k.startswith("data.test") for k in keys) else "val"
    other = f"limit_{'val' if split == 'test' else 'test'}_batches"
    if other in trainer:
        warnings.warn(f"trainer.{other} is not read: split={split} evaluates the {split} split",
                      AttnflowWarning)
    _check_run_fixed(keys, cfg, run.config.get("data") or {})
    return cfg, split, trainer


def _check_kinds(cfg: Dict[str, Any]) -> None:
    """The data gives what the run's model works on (its ``interface``), else a ConfigError."""
    from attnflow.training.validate import INTERFACES

    data_kind = DATA.get(cfg["data"]["name"]).interface
    model_kind = MODELS.get(cfg["model"]["name"]).interface
    if data_kind and model_kind and data_kind != model_kind:
        same = [n for n in DATA.names() if DATA.get(n).interface == model_kind]
        raise ConfigError(f"data '{cfg['data']['name']}' gives {INTERFACES.get(data_kind, data_kind)}, "
                          f"but the run's model '{cfg['model']['name']}' works on "
                          f"{INTERFACES.get(model_kind, model_kind)}: evaluate it on data of its "
                          f"kind ({', '.join(same)})")


def _check_run_fixed(keys: List[str], cfg: Dict[str, Any], trained: Dict[str, Any]) -> None:
    """A field the model is bound to (the data's ``run_fixed``: the translation direction) given
    another value than the run's is an error."""
    fixed = [f for f in DATA.get(cfg["data"]["name"]).run_fixed if f"data.{f}" in keys]
    if not fixed or trained.get("name") != cfg["data"]["name"]:
        return
    before = DATA.validate(trained, "data")  # with the defaults the stored config left out
    for f in fixed:
        if cfg["data"].get(f) != before.get(f):
            raise ConfigError(f"data.{f}={cfg['data'].get(f)}: the run was trained with data.{f}="
                              f"{before.get(f)}, and its model fits only that; evaluate a run "
                              f"trained for the other setting")


def output_path(run: Run, split: str, out: Optional[str]) -> Path:
    """Where the metrics go: ``-o`` (checked, and locked, by :func:`evaluate`), else a new name
    in ``<run dir>/eval``."""
    if out:
        return Path(out)
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    path = run.run_dir / "eval" / f"{split}-{stamp}.json"
    check_folder(f"without -o the metrics go to {path}", path,
                 "move that file away, or name the output with -o FILE")
    n = 1
    while path.exists():
        n += 1
        path = run.run_dir / "eval" / f"{split}-{stamp}-{n}.json"
    return path


def _write_new(path: Path, data: dict) -> None:
    """Write ``data`` as JSON to ``path``, which must not exist (a link from a finished temporary
    file: atomic, and it fails on an existing name)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
        os.link(tmp, path)
    except FileExistsError:
        raise ConfigError(f"{path} appeared while evaluating; it is not overwritten") from None
    finally:
        tmp.unlink(missing_ok=True)


def evaluate(target: Path | str, overrides: List[str] = (), out: Optional[str] = None,
             device: str = "cpu") -> Tuple[Dict[str, Any], Path]:
    """Evaluate a run; returns (the written summary, its path)."""
    pairs = parse_overrides(list(overrides))
    with contextlib.ExitStack() as held:
        if out:  # a second writer of the same file is refused before any work
            check_new_outputs(("-o", out))
            held.enter_context(writing(out, f"-o {out}"))
            check_new_outputs(("-o", out))  # (written by the holder it waited behind)
        run = load_run(target, device)
        cfg, split, trainer_fields = apply_overrides(run, pairs)
        path = output_path(run, split, out)
        return _evaluate(run, cfg, split, trainer_fields, path, overrides, device)


def _evaluate(run: Run, cfg: Dict[str, Any], split: str, trainer_fields: Dict[str, Any], path: Path,
              overrides: List[str], device: str) -> Tuple[Dict[str, Any], Path]:
    """Lightning's Trainer (``device`` and the ``trainer.*`` overrides) validates or tests the
    rebuilt task; the summary is written to ``path``."""
    import pytorch_lightning as pl

    from attnflow.training.precision import resolve_precision
    from attnflow.training.trainer_checks import lightning_errors

    start = time.time()
    fields, note, warn = resolve_precision({"accelerator": device, "precision": "32-true", **trainer_fields})
    if note:  # trainer.precision=auto
        print(f"attnflow-eval: {'warning: ' if warn else ''}{note}", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="attnflow-eval-") as scratch:  # task side files
        with lightning_errors():  # what Lightning refuses of the fields: one message
            trainer = pl.Trainer(accelerator=fields["accelerator"], devices=fields.get("devices", 1),
                                 precision=fields["precision"], limit_val_batches=fields.get("limit_val_batches"),
                                 limit_test_batches=fields.get("limit_test_batches"), logger=False,
                                 enable_checkpointing=False, enable_progress_bar=False,
                                 enable_model_summary=False, default_root_dir=scratch)
        pl.seed_everything(cfg.get("seed", 1234), workers=True, verbose=False)
        used = resolve_env(cfg)  # (${oc.env:…} as recorded: its value for the work only)
        dm = DATA.build(used["data"], path="data")
        dm.setup_evaluation(run.run_dir, run_artifacts(run), split)
        ctx = dm.model_context()
        model = MODELS.build(used["model"], path="model", **ctx)
        sizes = ", ".join(f"{k}={v}" for k, v in ctx.items() if type(v) is int and k != "pad_id")
        load_weights(model, run.ckpt["state_dict"], "model.", f"model '{cfg['model']['name']}' "
                     f"built for data '{cfg['data']['name']}'" + (f" ({sizes})" if sizes else ""))
        task = TASKS.build(used["task"], model, path="task", **dm.task_context())
        task.run_config = cfg
        results = (trainer.validate if split == "val" else trainer.test)(task, datamodule=dm, verbose=False)
    metrics = {k: float(v) for r in results or [] for k, v in r.items()}
    if not metrics:
        raise ValueError(f"the {split} split gave no metrics (is it empty?)")
    summary = {"metrics": metrics, "split": split, "run_dir": str(run.run_dir),
               "checkpoint": str(run.checkpoint), "data": cfg["data"], "overrides": list(overrides),
               "seconds": round(time.time() - start, 2),
               "created": datetime.now().isoformat(timespec="seconds")}
    if isinstance(task, TASKS.get("translation")) and task.bleu_signature:
        summary["bleu_signature"] = task.bleu_signature
    _write_new(path, summary)
    return summary, path


def print_metrics(summary: Dict[str, Any], path: Path) -> None:
    table = Table(title=f"{summary['split']} metrics", caption=summary["checkpoint"])
    table.add_column("metric")
    table.add_column("value", justify="right")
    for k, v in sorted(summary["metrics"].items()):
        table.add_row(k, f"{v:.6g}")
    Console().print(table)
    print(f"attnflow-eval: written to {path}", file=sys.stderr)


def main(argv: Optional[List[str]] = None) -> int:
    bound_primitive_cache()  # before any tensor work: oneDNN reads it once
    plain_warnings()
    p = argparse.ArgumentParser(prog="attnflow-eval", description=__doc__.split("\n\n")[0],
                                epilog=f"overrides: {USAGE}")
    p.add_argument("run", type=path_arg, help="a run directory or a .ckpt file")
    p.add_argument("overrides", nargs="*", help="key=value (see below)")
    p.add_argument("-o", "--output", type=path_arg, help="write the metrics JSON here (never overwritten)")
    p.add_argument("--device", default="cpu", help="the accelerator (default cpu)")
    args = p.parse_intermixed_args(argv)
    quiet = logging.getLogger("pytorch_lightning")
    level = quiet.level
    quiet.setLevel(logging.WARNING)  # Lightning's "GPU available: …" lines
    try:
        summary, path = evaluate(args.run, args.overrides, args.output, args.device)
    except (CheckpointError, OSError, ValueError) as err:  # ConfigError: a ValueError
        print(f"attnflow-eval: {'config error: ' if type(err) is ConfigError else ''}{err}",
              file=sys.stderr)
        return 2
    finally:
        quiet.setLevel(level)
    print_metrics(summary, path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
