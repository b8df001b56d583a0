"""Run-wide test settings. Under pytest-xdist (``-n 2``, the README's test command) each worker is
one process sharing the machine's cores with the others: one intra-op thread per worker (and per
process it starts, through ``OMP_NUM_THREADS``) keeps them from oversubscribing the cores."""

import os

import torch

if os.environ.get("PYTEST_XDIST_WORKER"):
    torch.set_num_threads(1)
    os.environ["OMP_NUM_THREADS"] = "1"
