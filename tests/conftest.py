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
# loadscope gives each worker whole modules, those with the most tests first, so the modules of one
# to three long tests (a real-data run, a training to a threshold, a wheel build) came last, and
# whichever worker drew the last of them went on alone for up to half a minute after the other had
# finished. They are handed out first instead, longest first (seconds on a 2-core CI machine); the
# run then ends on short modules. A module missing from the run is skipped.
LONG_FEW_TEST_MODULES = (
    "tests/documents/test_imdb_short_run.py",  # ~36 s: HAN on 2,000 IMDB reviews
    "tests/test_caption_grounding.py",  # ~25 s: the captioner on the shapes set
    "tests/test_packaging.py",  # ~19 s: a wheel built, installed and run
    "tests/test_train_default.py",  # ~16 s: the default experiment learns the reversal
    "tests/test_mt_overfit.py",  # ~14 s: 200 Multi30k pairs
    "tests/test_bench_gat_planetoid.py",  # ~8 s: two short Cora runs of bench/gat_planetoid.py
)


@pytest.hookimpl(optionalhook=True)  # (pytest without xdist: never called)
def pytest_xdist_make_scheduler(config, log):
    """``--dist loadscope`` with :data:`LONG_FEW_TEST_MODULES` at the head of its queue; any other
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
                for scope in reversed(LONG_FEW_TEST_MODULES):
                    if scope in queue:
                        queue.move_to_end(scope, last=False)
            super()._assign_work_unit(node)

    return LongModulesFirst(config, log)
