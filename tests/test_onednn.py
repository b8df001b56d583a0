"""attnflow.training.onednn: the console scripts bound oneDNN's primitive cache before any tensor work, and
the bound takes effect (a shape used again after more distinct shapes than the bound is built
again) unless the user exported a value of their own."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch

from attnflow.cli import evaluate, predict, tool, train, translate
from attnflow.training import onednn

# One bf16 product of shape n×256 · 256×64 for n = 1, then 2…299, then 1 again, with oneDNN's
# creation log on: the last product's primitive is either still cached (cache_hit) or built again.
SCRIPT = textwrap.dedent("""
    import sys
    if sys.argv[1] == "bound":
        from attnflow.training.onednn import bound_primitive_cache
        bound_primitive_cache()
    import torch
    torch.set_num_threads(1)
    w = torch.randn(64, 256, dtype=torch.bfloat16)
    with torch.backends.mkldnn.verbose(torch.backends.mkldnn.VERBOSE_ON_CREATION):
        for n in (1, *range(2, 300)):
            torch.randn(n, 256, dtype=torch.bfloat16) @ w.t()
        print("AGAIN", flush=True)
        torch.randn(1, 256, dtype=torch.bfloat16) @ w.t()
""")


def _last_creation(mode: str, **env: str) -> str:
    clean = {k: v for k, v in os.environ.items() if k != onednn.VARIABLE} | env
    out = subprocess.run([sys.executable, "-c", SCRIPT, mode], capture_output=True, text=True,
                         env=clean, check=True, timeout=120).stdout
    created = [line.split(",")[3] for line in out.split("AGAIN", 1)[1].splitlines()
               if ",primitive,create:" in line]
    if not created:  # (a CPU whose bf16 products PyTorch runs without oneDNN)
        pytest.skip("oneDNN built no primitive for these bf16 products on this CPU")
    return created[0]


@pytest.mark.skipif(not torch.ops.mkldnn._is_mkldnn_bf16_supported(),
                    reason="this CPU runs bf16 products without oneDNN")
@pytest.mark.slow
def test_the_bound_takes_effect_and_a_users_value_wins():
    assert onednn.CAPACITY < 298  # the products in between outnumber the bound
    assert _last_creation("bound") == "create:cache_miss"
    # the user's own value (here oneDNN's default) is kept: the first shape is still cached
    assert _last_creation("bound", ONEDNN_PRIMITIVE_CACHE_CAPACITY="1024") == "create:cache_hit"


def test_the_variable_is_set_unless_the_user_set_it(monkeypatch):
    monkeypatch.delenv(onednn.VARIABLE, raising=False)
    onednn.bound_primitive_cache()
    assert os.environ[onednn.VARIABLE] == str(onednn.CAPACITY)
    monkeypatch.setenv(onednn.VARIABLE, "7")
    onednn.bound_primitive_cache()
    assert os.environ[onednn.VARIABLE] == "7"


class _Called(Exception):
    pass


@pytest.mark.parametrize("cli", [train, translate, evaluate, predict], ids=lambda m: m.__name__)
def test_every_console_script_that_runs_a_model_bounds_it_first(cli, monkeypatch):
    def first(*_):
        raise _Called
    monkeypatch.setattr(train if cli is train else tool, "bound_primitive_cache", first)
    monkeypatch.setattr(sys, "argv", ["attnflow", "x"])
    with pytest.raises(_Called):  # before parsing arguments, so before any model or tensor work
        cli.main() if cli is train else cli.main(["x"])
