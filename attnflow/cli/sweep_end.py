"""A sweep's first and last words, for any sweeper: its folder as it starts; as it ends, its runs
ranked as ``attnflow-report`` ranks them (in short) and the folder again. A Hydra callback
(``hydra.callbacks.sweep_summary`` in conf/hydra/default.yaml)."""

from __future__ import annotations

from typing import Any

from hydra.experimental.callback import Callback

from attnflow.io.console import command
from attnflow.viz.report_pages import print_table
from attnflow.viz.runs import ReportError, build


class SweepSummary(Callback):
    """Prints ``sweep folder: …`` before the first job and the ranked table after the last."""

    def on_multirun_start(self, config: Any, **kwargs: Any) -> None:
        print(f"sweep folder: {config.hydra.sweep.dir}", flush=True)

    def on_multirun_end(self, config: Any, **kwargs: Any) -> None:
        folder = config.hydra.sweep.dir
        try:
            print_table(build(folder), most=10)
        except ReportError as err:  # (no job wrote a run)
            print(f"sweep folder: {folder}: {err}", flush=True)
            return
        print(f"sweep folder: {folder} (the full report: {command('attnflow-report', str(folder))})",
              flush=True)
