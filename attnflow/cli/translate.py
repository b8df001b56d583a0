"""attnflow-translate: translate sentences with a trained run directory or checkpoint.

    attnflow-translate RUN "Ein Mann schläft."                  # sentences as arguments
    attnflow-translate RUN -f sentences.de.gz > out.en         # one per line (or stdin)
    attnflow-translate RUN "Ein Hund läuft." --attention alpha.png --beam 5   # α heat map
    attnflow-translate RUN_A -f in.de --ensemble RUN_B --ensemble b/checkpoints/epoch9.ckpt

Output: one line per input line (an empty line for an empty one; one over ``data.max_src_len``
subwords is cut, with a note). Without ``--beam``, ``--length-penalty``, ``--max-len`` a run
decodes as its test step did. ``--ensemble`` decodes with the mean of the members' next-token
distributions; they share the first's tokenizers, and its settings apply. ``--save-attention``
holds ``kind``, ``lines`` and per line i, from a teacher-forced pass over the output:
``{i}/source`` (S,), ``{i}/output`` (T,), ``{i}/cross`` (L, J, T, S) (RNN decoders: L = 1) and
for Transformers ``{i}/encoder_self`` (L, J, S, S) and ``{i}/decoder_self`` (L, J, T, T).
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path
from typing import List, Optional

import attnflow  # noqa: F401  (the ${attnflow_root:} resolver of conf/paths)
from attnflow.cli.predict_io import label_all, positive, read_texts
from attnflow.cli.tool import run_tool
from attnflow.config.registry import AttnflowWarning, ConfigError
from attnflow.inference.runs import InferenceError
from attnflow.io.checkpoints import CheckpointError, load_run
from attnflow.io.text import InputError, check_new_outputs, check_npz, check_png, no_inputs, path_arg


def heat_map_names(out: str, n: int) -> List[Path]:
    """``--attention OUT.png``: the files of ``n`` heat maps, OUT.png, OUT_1.png, OUT_2.png, …"""
    base = Path(out)
    return [base.with_name(f"{base.stem}_{k}{base.suffix}") if k else base for k in range(n)]


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="attnflow-translate", description=__doc__.split("\n\n")[0])
    ap.add_argument("run", type=path_arg, help="a run directory (attnflow-train output) or a .ckpt file")
    ap.add_argument("sentences", nargs="*", help="sentences to translate (else -f FILE, else stdin)")
    ap.add_argument("-f", "--file", type=path_arg, help="a text file (.gz: gzip), one sentence per line")
    ap.add_argument("--beam", type=positive, default=None,
                    help="beam size; 1 = greedy (default: the run's task.beam_size, else 1)")
    ap.add_argument("--length-penalty", type=float, default=None,
                    help="GNMT α (default: the run's task.length_penalty, else 0.6)")
    ap.add_argument("--max-len", type=positive, default=None,
                    help="longest output in subwords (default: the run's data.max_decode_len)")
    ap.add_argument("--batch-size", type=positive, default=64,
                    help="lines decoded and printed together (default 64)")
    ap.add_argument("--attention", metavar="OUT.png", type=path_arg,
                    help="write the α heat map of the first sentence (more sentences: OUT_1.png, …)")
    ap.add_argument("--save-attention", metavar="OUT.npz", type=path_arg,
                    help="write every attention map as arrays")
    ap.add_argument("--ensemble", metavar="PATH", action="append", default=[], type=path_arg,
                    help="another run or .ckpt decoding with the first (repeatable)")
    ap.add_argument("--device", default="cpu")
    return ap


def _check_options(args) -> None:
    """Outputs, before any work; an ensemble's attention options (no one map) are one warning."""
    if args.ensemble and (args.attention or args.save_attention):
        warnings.warn("--attention and --save-attention are not read with --ensemble: an ensemble "
                      "has no one attention map", AttnflowWarning)
        args.attention = args.save_attention = None
    if args.save_attention:
        check_npz(args.save_attention)
    maps = []
    if args.attention:  # sentences given: each one's map (a blank one has none); -f, stdin: later
        check_png(args.attention)
        maps = heat_map_names(args.attention, max(1, sum(bool(s.strip()) for s in args.sentences)))
    check_new_outputs(*(("--attention", p) for p in maps), ("--save-attention", args.save_attention))


def _translate_all(args, lines, where: str, model, dm, beam: int, length_penalty: float) -> list:
    """Translate ``lines`` batch by batch, printing each, and write ``--save-attention``; the
    heat maps to draw (α, source and output tokens, what α is, the line)."""
    from attnflow.inference import translation as mt  # torch: once the options are checked

    max_len, limit, heat_maps = args.max_len or dm.max_decode_len, dm.max_src_len, []

    def step(chunk, first):
        ids, full = mt.encode(dm, chunk)
        rows, w = mt.decode_ids(model, ids, beam, length_penalty, max_len,
                                need_weights=bool(args.attention), batch_size=args.batch_size)
        if args.attention:
            heat_maps.extend((*m, line) for m, line in zip(mt.heat_maps(model, dm, w, ids, rows), chunk)
                             if m)
        arrays = mt.saved_attention(model, dm, ids, rows, first) if args.save_attention else {}
        return [{"empty": not (line.strip() and n), "size": n, "cut": max(0, n - limit),
                 "out": dm.detokenize(r)} for line, n, r in zip(chunk, full, rows)], arrays

    def note(r, _):
        return (f"has {r['size']} subwords; the model reads at most {limit} (data.max_src_len of the "
                f"run): {r['cut']} subwords cut, the rest is translated") if r["cut"] else None

    label_all(args, sys.stdout, lines, where, step, lambda r: r["out"], note, what="lines",
              caps=f"{limit} subwords: " + "{cut} of {size} subwords", kind="translation",
              empty="nothing to translate (an empty line is written in its place)",
              none=no_inputs("sentences", "-f", args.file, metavar=" FILE"), prog="attnflow-translate")
    return heat_maps


def _draw(args, heat_maps: list) -> None:
    """``--attention``: the heat maps as OUT.png, OUT_1.png, …"""
    from attnflow.viz.figures import save_attention_png

    names = heat_map_names(args.attention, len(heat_maps))
    check_new_outputs(*(("--attention", p) for p in names))  # -f, stdin: known only now
    for p, (weights, src, out, what, line) in zip(names, heat_maps):
        save_attention_png(p, weights, src, out, f"{what}: {line[:60]}", label=what)
    if not heat_maps:
        print("attnflow-translate: no heat map written: this model has no attention "
              "(or every input line was empty)", file=sys.stderr)


def _translate(args) -> int:
    _check_options(args)
    lines, where = read_texts(args, args.sentences, None, "-f")
    paths = [Path(p) for p in [args.run, *args.ensemble]]
    runs = [load_run(p, args.device) for p in paths]
    from attnflow.inference import translation as mt  # torch: once the options and runs are checked

    model, dm, configs = mt.load_members(paths, args.device, runs)
    beam, length_penalty = mt.decoding_settings(paths, configs, args.beam, args.length_penalty)
    heat_maps = _translate_all(args, lines, where, model, dm, beam, length_penalty)
    if args.attention:
        _draw(args, heat_maps)
    return 0


def main(argv: Optional[List[str]] = None) -> int:
    return run_tool(_parser(), argv, _translate,
                    (InferenceError, CheckpointError, InputError, ConfigError, OSError))


if __name__ == "__main__":
    sys.exit(main())
