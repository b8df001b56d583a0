"""Stopping on SIGINT (Ctrl-C), SIGTERM (sent by SLURM, Kubernetes, ``timeout`` before a kill) or
SIGUSR1 (SLURM's ``--signal=USR1@90``) without losing work: while training, the first signal stops
after the running optimiser step with ``last.ckpt`` written (the loader's position too), the loggers
finished and the resume command printed; the exit status is ``128 + signal`` (130, 143, 138). A
second signal, or one outside the training loop, stops at once. DDP ranks stop at one step. In a
SLURM batch job SIGUSR1 also requeues the job to continue the run (:mod:`attnflow.training.requeue`).
"""

from __future__ import annotations

import signal
import sys
import threading
from pathlib import Path
from typing import Any, Dict, Optional, Protocol, runtime_checkable

import pytorch_lightning as pl

from attnflow.io.console import command
from attnflow.training.requeue import requeue

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)


class Interrupted(SystemExit):
    """A run stopped by signal ``signum``; its exit status is ``128 + signum``."""

    def __init__(self, signum: int):
        super().__init__(128 + signum)
        self.signum = signum


@runtime_checkable
class ContinuedElsewhere(Protocol):
    """A callback of a run that is continued by another command than ``resume=<run>`` (a sweep's
    trial: the sweep's command, which resumes it): what a stop prints."""

    def continue_command(self) -> Optional[str]: ...


class StopOnSignal(pl.Callback):
    """:data:`SIGNALS` as a stop after the running step; its handlers replace Lightning's (whose
    SIGTERM stop exits 0) from a Trainer call's first train, validation or test start to its end."""

    def __init__(self, run_dir: Path | str, output_root: Optional[str] = None):
        self.run_dir, self.output_root = Path(run_dir), output_root
        self.requeued: Optional[str] = None
        self.last = self.run_dir / "checkpoints" / "last.ckpt"
        self.requested: Optional[int] = None
        self.training = False
        self.saved = False
        self._previous: Dict[int, Any] = {}

    def _handler(self, signum: int, frame: Any) -> None:
        if self.requested is not None or not self.training:
            raise Interrupted(signum)
        self.requested = signum
        print(f"\nattnflow: {signal.Signals(signum).name}: stopping after this training step and "
              f"saving last.ckpt (send it again to stop at once)", file=sys.stderr, flush=True)

    def _install(self) -> None:
        if not self._previous and threading.current_thread() is threading.main_thread():
            self._previous = {s: signal.signal(s, self._handler) for s in SIGNALS}

    def _restore(self) -> None:
        if self._previous and threading.current_thread() is threading.main_thread():
            for signum, handler in self._previous.items():
                signal.signal(signum, handler)
        self._previous = {}

    def on_train_start(self, *_: Any) -> None:
        self.training = True
        self._install()

    def on_train_end(self, *_: Any) -> None:
        self.training = False

    on_validation_start = on_test_start = on_predict_start = lambda self, *_: self._install()

    def teardown(self, trainer: Any = None, pl_module: Any = None, stage: Any = None) -> None:
        self.training = False
        self._restore()

    def _should_stop(self, trainer: pl.Trainer) -> bool:
        asked = self.requested is not None
        if trainer.world_size > 1:  # (all ranks stop at one step)
            return bool(trainer.strategy.reduce_boolean_decision(asked, all=False))
        return asked

    def _stop(self, trainer: pl.Trainer) -> None:
        trainer.save_checkpoint(self.last, weights_only=False)  # (the whole training state)
        self.saved = True
        if self.requested == signal.SIGUSR1 and self.output_root and trainer.is_global_zero:
            self.requeued = requeue(self.run_dir, self.output_root)
        raise Interrupted(self.requested or signal.SIGTERM)  # (another rank's signal: the usual one)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        done = batch_idx + 1
        stepped = done % max(1, trainer.accumulate_grad_batches) == 0
        if done < trainer.num_training_batches and stepped and self._should_stop(trainer):
            self._stop(trainer)

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        if self._should_stop(trainer):
            self._stop(trainer)

    def on_exception(self, trainer, pl_module, exception: BaseException) -> None:
        self.teardown()
        if not isinstance(exception, (Interrupted, KeyboardInterrupt)) or not trainer.is_global_zero:
            return
        what = (f"saved {self.last} (epoch {trainer.current_epoch}, step {trainer.global_step})"
                if self.saved else f"the last checkpoint is {self.last}" if self.last.is_file()
                else None)
        elsewhere = next((c.continue_command() for c in trainer.callbacks
                          if isinstance(c, ContinuedElsewhere)), None)
        if elsewhere:
            print(f"\nattnflow: interrupted; {what or 'no checkpoint yet'}. Continue the study "
                  f"with:\n  {elsewhere}", file=sys.stderr, flush=True)
        else:
            print(f"\nattnflow: interrupted; {what}. Resume with:\n  "
                  f"{command('attnflow-train', resume=str(self.run_dir))}"
                  if what else "\nattnflow: interrupted before the first checkpoint; nothing to resume",
                  file=sys.stderr, flush=True)
        if self.requeued:
            print(f"attnflow: {self.requeued}", file=sys.stderr, flush=True)
