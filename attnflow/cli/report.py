"""``attnflow-report``: the results of a run or a sweep without W&B — one self-contained HTML page,
the same table as Markdown and CSV, PNG plots, and the table in the terminal.

    attnflow-report outputs/multirun/2026-11-23/16-37-38-531686      # writes <dir>/report/
    attnflow-report <sweep dir> --metric val/token_acc               # sort by another metric

Runs are sorted by ``--metric``, else the config's ``optimized_metric``, else the checkpoint
monitor, else ``val/loss``; runs of different experiments are ranked apart, and a run without
metrics is listed last with its status. An Optuna study is read from a copy of its storage
(``optuna.db`` or ``optuna.journal``): its trial counts, best or Pareto-optimal trials and figures. The
output folder (``-o``, default ``<path>/report``) is new, empty or an earlier report of the same
path (``.report-of``); any other folder is refused before anything is written.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Optional, Sequence

from attnflow.io.text import InputError, check_folder, path_arg
from attnflow.viz.report_pages import REPORT_OF, print_table, write_report
from attnflow.viz.runs import ReportError, build
from attnflow.viz.study import attach_study


def check_out(out: Path, source: Path) -> None:
    """Refuse an output folder that is not new, empty, a report of ``source`` (``.report-of``)
    or ``source``'s own ``report`` folder (also of a run or sweep moved since)."""
    if not out.exists():
        return
    if not out.is_dir():
        raise ReportError(f"-o '{out}' is a file; name a folder for the report")
    if out.resolve() == (source / "report").resolve() and (out / "report.html").is_file():
        return  # the path's own report folder (also of a sweep moved or copied since)
    mark = out / REPORT_OF
    if mark.is_file():
        made_from = mark.read_text(encoding="utf-8").strip()
        if made_from == str(source.resolve()):
            return
        raise ReportError(f"'{out}' holds the report of '{made_from}', not of '{source.resolve()}', "
                          f"and is not overwritten; name another folder with -o")
    held = sorted(p.name for p in out.iterdir())
    if held:
        shown = ", ".join(held[:4]) + (f" and {len(held) - 4} more" if len(held) > 4 else "")
        raise ReportError(f"'{out}' holds other files ({shown}), which the report could overwrite; "
                          f"name a new or empty folder with -o")


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(
        prog="attnflow-report", description="Report a run or a sweep (multirun) directory: "
        "report.html (self-contained), report.md, report.csv and PNG plots; the table in the terminal.")
    parser.add_argument("path", type=lambda v: Path(path_arg(v)),
                        help="a run directory or a multirun (sweep) directory")
    parser.add_argument("-o", "--out", type=lambda v: Path(path_arg(v)), default=None,
                        help="output folder (default: <path>/report)")
    parser.add_argument("--metric", default=None, help="sort by this metric (default: the config's "
                        "optimized_metric, else the checkpoint metric)")
    parser.add_argument("--pictures", type=int, default=4, help="attention pictures per run (default 4)")
    args = parser.parse_args(argv)
    if args.pictures < 0:
        parser.error(f"--pictures must be >= 0, got {args.pictures}")
    import matplotlib

    matplotlib.use("Agg")
    out = args.out or args.path / "report"
    try:
        if args.out is not None:  # before the runs are read: writing under a file fails at the end
            check_folder(f"-o '{out}'", out / "report.html", "name a folder for the report")
        report = build(args.path, args.metric, args.pictures)
        check_folder(f"the report folder '{out}'", out / "report.html", "name a folder with -o")
        check_out(out, args.path)
        attach_study(report)
    except (ReportError, InputError) as err:
        print(f"attnflow-report: {err}", file=sys.stderr)
        sys.exit(2)
    try:
        files = write_report(report, out)
    except OSError as err:
        print(f"attnflow-report: cannot write the report to '{out}': {err}", file=sys.stderr)
        sys.exit(2)
    print_table(report)
    print("wrote " + ", ".join(str(p) for p in files.values()))


if __name__ == "__main__":
    main()
