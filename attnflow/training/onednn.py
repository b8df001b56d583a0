"""A bound on oneDNN's primitive cache, set by the console scripts before any tensor work.

PyTorch runs bfloat16 matrix products on the CPU through oneDNN, which keeps one compiled
primitive per distinct operand shape in a cache of ``ONEDNN_PRIMITIVE_CACHE_CAPACITY`` entries
(oneDNN's default: 1024), each holding its own scratch memory. A token-budget batch changes both
its number of sentences and its length from step to step, so a long CPU run in ``bf16-mixed``
keeps creating primitives until the cache is full: a 3-hour en→de run
(``experiment=mt_transformer_3h_ende``, one thread) grew to 9.2 GB resident. Primitives are
reused within a step (every layer has the same shapes), rarely across steps, so a small cache
loses little: one epoch of that recipe (454 steps, one thread) peaked at 4.1 GB resident with the
default and 2.4 GB with 128, in 260 against 262 s (four of each, alternated; docs/benchmarks.md,
"Memory of a CPU bf16 run"), and with 128 the growth levels off; with no cache at all (0) the
steps were 20–25 % slower.

oneDNN reads the variable once, when it first builds a primitive, so it is set before any work;
a value the user exported wins.
"""

from __future__ import annotations

import os

VARIABLE = "ONEDNN_PRIMITIVE_CACHE_CAPACITY"
CAPACITY = 128


def bound_primitive_cache() -> None:
    """Set ``ONEDNN_PRIMITIVE_CACHE_CAPACITY`` to :data:`CAPACITY` unless it is already set."""
    os.environ.setdefault(VARIABLE, str(CAPACITY))
