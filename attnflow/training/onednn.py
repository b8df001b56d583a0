"""A bound on oneDNN's primitive cache, set by the console scripts before any tensor work.

oneDNN (PyTorch's CPU bfloat16 products) keeps a compiled primitive per operand shape, up to
``ONEDNN_PRIMITIVE_CACHE_CAPACITY`` (default 1024); token-budget batches change shape every step,
so a long CPU bf16 run grew to 9.2 GB. With 128 one epoch peaked at 2.4 GB instead of 4.1 GB at
the same speed (docs/benchmarks.md, "Memory of a CPU bf16 run"). A value the user set wins.
"""

from __future__ import annotations

import os

VARIABLE = "ONEDNN_PRIMITIVE_CACHE_CAPACITY"
CAPACITY = 128


def bound_primitive_cache() -> None:
    """Set ``ONEDNN_PRIMITIVE_CACHE_CAPACITY`` to :data:`CAPACITY` unless it is already set."""
    os.environ.setdefault(VARIABLE, str(CAPACITY))
