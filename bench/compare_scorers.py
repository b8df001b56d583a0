"""docs/compare.md's worked example: the default experiment trained with the dot, general and
additive scorers, compared by attnflow-compare on 8 validation sequences against the reversal's
gold alignment (source word i with target word n − 1 − i). Prints the table, writes JSON.

    python bench/compare_scorers.py                          # trains the sweep (~10 min, 2 cores)
    python bench/compare_scorers.py --sweep outputs/scorers  # a sweep trained before
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from attnflow.config.registry import DATA

SCORERS = ("dot", "general", "additive")


def gold(sweep: Path, n: int) -> Path:
    """The reversal's alignment of the first ``n`` validation sequences of the sweep's data."""
    import yaml

    data = yaml.safe_load((sweep / "0" / "config.yaml").read_text())["data"]
    dm = DATA.build(data, path="data")
    dm.setup()
    path = sweep / "reverse_alignment.txt"
    path.write_text("".join(" ".join(f"{i}-{len(x) - 1 - i}" for i in range(len(x))) + "\n"
                            for x, _ in dm.splits["val"][:n]))
    return path


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sweep", type=Path, default=Path("outputs/scorers"))
    p.add_argument("--examples", type=int, default=8)
    p.add_argument("--out", default="bench/results/compare_scorers.json")
    args = p.parse_args()
    if not (args.sweep / "multirun.yaml").is_file():
        subprocess.run(["attnflow-train", "-m", f"scorer={','.join(SCORERS)}",
                        f"hydra.sweep.dir={args.sweep}"], check=True)
    out = args.sweep / "compare"
    subprocess.run(["attnflow-compare", str(args.sweep), "--examples", str(args.examples),
                    "--alignments", str(gold(args.sweep, args.examples)), "-o", str(out)],
                   check=True, stdout=subprocess.DEVNULL)
    stats = json.loads((out / "stats.json").read_text())
    rows = []
    for row in stats["statistics"]:
        run = row["run"]
        acc = json.loads((Path(stats["runs"][run]) / "metrics.json").read_text())["metrics"]
        rows.append({"run": run, "best/val/seq_acc": acc.get("best/val/seq_acc"),
                     **{k: row[k] for k in ("entropy (bits)", "H / uniform", "largest weight", "diagonality")},
                     "AER": stats["aer"][run],
                     **{k: row[k] for k in row if k.startswith("JS vs")}})
    cols = list(rows[0])
    print(" | ".join(cols))
    for r in rows:
        print(" | ".join("—" if r[c] is None else f"{r[c]:.3f}" if isinstance(r[c], float) else str(r[c])
                         for c in cols))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"sweep": str(args.sweep), "rows": rows}, indent=2))
    print(f"wrote {args.out}; the page: {out / 'compare.html'}", file=sys.stderr)


if __name__ == "__main__":
    main()
