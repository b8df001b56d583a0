"""Run-wide test settings. Under pytest-xdist (``-n 2``, the README's test command) each worker is
one process sharing the machine's cores with the others: one intra-op thread per worker (and per
process it starts, through ``OMP_NUM_THREADS``) keeps them from oversubscribing the cores."""

import os

import pytest
import torch

if os.environ.get("PYTEST_XDIST_WORKER"):
    torch.set_num_threads(1)
    os.environ["OMP_NUM_THREADS"] = "1"


# -- the order in which pytest-xdist hands out modules (--dist loadscope) -------------------------------
# loadscope gives each worker whole modules, those with the most tests first, so the modules of a
# few long tests (sweeps and runs in several processes, a real-data run, a training to a threshold,
# a wheel build) came last, and whichever worker drew the last of them went on alone for minutes
# after the other had finished. The longest modules are handed out first instead, longest first
# (the CPU seconds of the module's tests and the processes they start, measured on a 2-core
# machine under load: a worker spends about that long on it); the run then ends on short modules.
# A module missing from the run is skipped.
LONG_MODULES = (
    "tests/test_sweep_workers.py",  # ~140 s: parallel sweeps stopped and resumed, PostgreSQL workers
    "tests/test_resume.py",  # ~80 s: runs stopped (signals, kill -9) and resumed
    "tests/test_sweep_optuna.py",  # ~75 s: studies continued, killed, run two trials at once
    "tests/test_multinode.py",  # ~70 s: two nodes of one run, stopped and resumed
    "tests/test_ddp.py",  # ~50 s: data-parallel runs on 2 processes
    "tests/test_caption_grounding.py",  # ~15 s: the captioner on the shapes set
    "tests/documents/test_imdb_short_run.py",  # ~13 s: HAN on 2,000 IMDB reviews
    "tests/test_packaging.py",  # ~11 s: a wheel built, installed and run
    "tests/test_mt_overfit.py",  # ~9 s: 200 Multi30k pairs
    "tests/test_train_default.py",  # ~6 s: the default experiment learns the reversal
)


@pytest.hookimpl(optionalhook=True)  # (pytest without xdist: never called)
def pytest_xdist_make_scheduler(config, log):
    """``--dist loadscope`` with :data:`LONG_MODULES` at the head of its queue; any other
    mode (or an xdist whose scheduler lacks the queue) keeps xdist's own scheduler."""
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class LongModulesFirst(LoadScopeScheduling):
        _reordered = False

        def _assign_work_unit(self, node):
            queue = getattr(self, "workqueue", None)
            if not self._reordered and hasattr(queue, "move_to_end"):
                self._reordered = True  # the first assignment: the queue is complete
                for scope in reversed(LONG_MODULES):
                    if scope in queue:
                        queue.move_to_end(scope, last=False)
            super()._assign_work_unit(node)

    return LongModulesFirst(config, log)
