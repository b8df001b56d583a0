"""Document tests run torch on one thread: on a small, shared CPU machine two OpenMP threads that
wait for each other make small RNN steps an order of magnitude slower (measured 0.64 s vs 9.2 s
per HAN training step with the machine's two cores busy). The previous setting is restored."""

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests/: the shared `support`


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
