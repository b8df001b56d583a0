"""Graph tests: make tests/support.py importable and use one CPU thread (2 oversubscribed threads
make PyG's scatter kernels orders of magnitude slower on a busy 2-core machine)."""

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


@pytest.fixture(autouse=True)
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    yield
    torch.set_num_threads(before)
