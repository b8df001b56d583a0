"""attnflow-blocks: every registered block with its fields, types and defaults.

    attnflow-blocks            # all kinds
    attnflow-blocks scorer     # one kind
    attnflow-blocks --config experiment=mt_transformer scorer=dot
                               # the blocks that run uses, every field with the value it takes
"""

from __future__ import annotations

import argparse
import sys

from hydra import compose, initialize_config_dir
from hydra.errors import HydraException
from omegaconf import OmegaConf
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from attnflow import config_dir
from attnflow.cli.help import unknown_override
from attnflow.config.groups import SHARED_GROUPS, field_overrides
from attnflow.config.registry import ConfigError, Registry  # each registry discovers its blocks on lookup
from attnflow.training.resume import ResumeError, from_hydra, prepare_argv


def main(argv=None) -> int:
    kinds = Registry.kinds()
    parser = argparse.ArgumentParser(prog="attnflow-blocks", description=__doc__.splitlines()[0])
    parser.add_argument("kind", nargs="?", choices=list(kinds), help="one kind of block")
    parser.add_argument("--config", nargs="*", metavar="OVERRIDE",
                        help="print the blocks a run with these overrides uses (the groups it "
                             "consumes, data, model, task, logger), every field with its value, "
                             "defaults filled in")
    args = parser.parse_args(argv)
    if args.config is not None:
        return _print_config(args.config)
    console = Console(width=max(Console().width, 120))
    for kind, registry in ((k, r) for k, r in kinds.items() if not args.kind or k == args.kind):
        table = Table(title=f"{kind} blocks", show_lines=False, title_justify="left")
        table.add_column("name", style="bold")
        for column in ("field", "type", "default"):
            table.add_column(column)
        for name in registry.names():
            fields = registry.fields(name)
            doc = (registry.get(name).__doc__ or "").strip().splitlines() or [""]
            table.add_row(name, f"[italic]{escape(doc[0])}[/italic]", "", "", end_section=not fields)
            for i, (field, tname, default) in enumerate(fields):
                table.add_row("", field, escape(tname), escape(repr(default)),
                              end_section=i == len(fields) - 1)
        console.print(table)
    return 0


def _print_config(overrides) -> int:
    from attnflow.training.validate import BLOCK_GROUPS, resolve_config  # torch: not for --help

    conf = config_dir()
    unknown = unknown_override(list(overrides), conf)
    if unknown:  # as attnflow-train says it
        print(f"attnflow: config error: {unknown}", file=sys.stderr)
        return 2
    try:  # resume=<run>: that run's config, after the checks attnflow-train makes
        overrides = field_overrides(prepare_argv(list(overrides)), conf)
        with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
            cfg = compose("train", overrides=overrides, return_hydra_config=True)
        resolved = resolve_config(from_hydra(cfg, overrides))
        groups = [(g, Registry.kinds()[g]) for g in SHARED_GROUPS] + BLOCK_GROUPS
        used = {group: registry.validate(resolved[group], group) for group, registry in groups
                if resolved.get(group) is not None}
    except (ConfigError, HydraException) as err:  # (Hydra's: an option it cannot find)
        kind = "" if isinstance(err, (ResumeError, HydraException)) else "config error: "
        print(f"attnflow: {kind}{err}", file=sys.stderr)
        return 2
    print(OmegaConf.to_yaml(_name_first(used)), end="")
    return 0


def _name_first(node):
    if not isinstance(node, dict):
        return node
    return {k: _name_first(node[k]) for k in sorted(node, key=lambda k: k != "name")}


if __name__ == "__main__":
    sys.exit(main())
