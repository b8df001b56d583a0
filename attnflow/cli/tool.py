"""What the main of attnflow-predict, -translate, -export and -eval shares: oneDNN's cache bound
and plain warnings before anything, the arguments parsed (options before or after the
positionals), and a problem the user can fix as one line ``prog: message``, exit status 2."""

from __future__ import annotations

import argparse
import sys
from typing import Callable, List, Optional, Tuple, Type

from attnflow.io.console import plain_warnings
from attnflow.training.onednn import bound_primitive_cache


def run_tool(parser: argparse.ArgumentParser, argv: Optional[List[str]], work: Callable[[argparse.Namespace], int],
             errors: Tuple[Type[BaseException], ...], message: Callable[[BaseException], str] = str) -> int:
    """``work(args)``'s exit status, or 2 after ``message(err)`` for one of ``errors``."""
    bound_primitive_cache()  # before any tensor work: oneDNN reads it once
    plain_warnings()
    args = parser.parse_intermixed_args(argv)
    try:
        return work(args)
    except errors as err:
        print(f"{parser.prog}: {message(err)}", file=sys.stderr)
        return 2
