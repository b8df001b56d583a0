"""attnflow-export: a trained run as a Hugging Face model directory or an ONNX file.

    attnflow-export RUN --to hf DIR          # BERT: pretraining, sequence or token classifier
    attnflow-export RUN --to onnx FILE.onnx  # BERT texts, HAN documents, GAT nodes, an MT encoder

``--to hf`` writes ``config.json``, ``model.safetensors`` and the tokenizer (``tokenizer.json``,
``vocab.txt``, ``tokenizer_config.json``): transformers' ``AutoModelFor…`` and ``AutoTokenizer``
load it and compute the run's outputs. ``--to onnx`` traces the model (batch, length, node and
edge counts left dynamic) and, where onnxruntime is installed, checks the file against the model
on the example it traced (inputs and outputs: :mod:`attnflow.inference.export`).

An output that exists, a run of another kind or a setting HF's BERT lacks: one line, exit 2.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import List, Optional

import attnflow  # noqa: F401  (the ${attnflow_root:} resolver of conf/paths)
from attnflow.cli.tool import run_tool
from attnflow.inference.runs import open_run, run_interface
from attnflow.io.text import check_new_outputs, path_arg


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="attnflow-export", description=__doc__.split("\n\n")[0])
    p.add_argument("model", type=path_arg, help="a run directory or a .ckpt file")
    p.add_argument("--to", choices=("hf", "onnx"), required=True, help="the format")
    p.add_argument("output", type=path_arg, help="a new directory (hf) or .onnx file")
    return p


def _export(args) -> int:
    out = Path(args.output)
    check_new_outputs(("output", args.output))
    run = open_run(args.model)
    kind = run_interface(run)
    from attnflow.inference.export import export_hf, export_onnx  # torch: once the run is read

    if args.to == "hf":
        done = f"{export_hf(run, kind, out)}: config.json, model.safetensors, tokenizer.json, vocab.txt, " \
               f"tokenizer_config.json"
    else:
        names, diff = export_onnx(run, kind, out)
        done = f"{out} (inputs {', '.join(names)})" + (
            "" if diff is None else f"; onnxruntime on the traced example: max |Δ| = {diff:.1e}")
    print(f"attnflow-export: {done}", file=sys.stderr)
    return 0


def main(argv: Optional[List[str]] = None) -> int:
    return run_tool(_parser(), argv, _export, (OSError, ValueError))


if __name__ == "__main__":
    sys.exit(main())
