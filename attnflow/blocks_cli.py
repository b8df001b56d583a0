"""``attnflow-blocks``: every registered block with its fields, types and defaults.

    attnflow-blocks            # all kinds
    attnflow-blocks scorer     # one kind
"""

from __future__ import annotations

import argparse
import sys

from rich.console import Console
from rich.markup import escape
from rich.table import Table

import attnflow  # noqa: F401  (registers the built-in blocks)
from attnflow.registry import Registry


def _first_line(obj) -> str:
    doc = (obj.__doc__ or "").strip()
    return doc.splitlines()[0] if doc else ""


def main(argv=None) -> int:
    kinds = Registry.kinds()
    parser = argparse.ArgumentParser(prog="attnflow-blocks", description=__doc__.splitlines()[0])
    parser.add_argument("kind", nargs="?", help=f"one of: {', '.join(kinds)}")
    args = parser.parse_args(argv)
    if args.kind and args.kind not in kinds:
        print(f"attnflow-blocks: unknown kind '{args.kind}'; kinds: {', '.join(kinds)}", file=sys.stderr)
        return 2
    console = Console(width=max(Console().width, 120))
    for kind, registry in kinds.items():
        if args.kind and kind != args.kind:
            continue
        table = Table(title=f"{kind} blocks", show_lines=False, title_justify="left")
        table.add_column("name", style="bold")
        table.add_column("field")
        table.add_column("type")
        table.add_column("default")
        for name in registry.names():
            fields = registry.fields(name)
            table.add_row(name, f"[italic]{escape(_first_line(registry.get(name)))}[/italic]", "", "",
                          end_section=not fields)
            for i, (field, tname, default) in enumerate(fields):
                table.add_row("", field, escape(tname), escape(repr(default)),
                              end_section=i == len(fields) - 1)
        console.print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
