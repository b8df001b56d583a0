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
from typing import List, Optional, Sequence, Tuple


import attnflow  # noqa: F401  (the ${attnflow_root:} resolver of conf/paths)
from attnflow.cli.predict_io import PredictError, label_all, positive, read_texts
from attnflow.config.registry import DATA, MODELS, TASKS, AttnflowWarning, ConfigError
from attnflow.config.secrets import resolve_env
from attnflow.io.checkpoints import CheckpointError, load_run, load_weights
from attnflow.io.console import plain_warnings
from attnflow.io.text import (InputError, check_new_outputs, check_npz, check_png,
                              no_inputs, path_arg, text_array)
from attnflow.training.onednn import bound_primitive_cache


class TranslateError(Exception):
    """A problem the user can fix; printed as one line."""


def load(path: Path, device: str = "cpu"):
    """(model, data module, config) from a run directory or checkpoint."""
    run = load_run(path, device)
    cfg = run.config
    if cfg["data"].get("name") != "parallel":
        raise TranslateError(f"the run at {run.run_dir} is not a translation run (data "
                             f"'{cfg['data'].get('name')}'); attnflow-eval gives any run's metrics, "
                             f"attnflow-predict labels documents, graph nodes, texts and images")
    used = resolve_env(cfg)  # (${oc.env:…} as recorded: its value for the work only)
    dm = DATA.build(used["data"], path="data")
    dm.load_tokenizers(run.run_dir / "tokenizer", run.ckpt.get("attnflow_artifacts"))
    model = MODELS.build(used["model"], path="model", **dm.model_context())
    load_weights(model, run.ckpt["state_dict"], "model.", f"model '{cfg['model'].get('name')}'")
    return model.to(device).eval(), dm, cfg


def load_ensemble(paths: Sequence[Path], device: str = "cpu"):
    """(model, data module, config) of ``paths[0]``, or the Ensemble of all ``paths`` with the
    first's data module and config."""
    model, dm, configs = load_members(paths, device)
    return model, dm, configs[0]


def load_members(paths: Sequence[Path], device: str = "cpu"):
    """:func:`load_ensemble`, with the config of every member (in the order of ``paths``)."""
    loaded = [load(path, device) for path in paths]
    (model, dm, _), configs = loaded[0], [cfg for _, _, cfg in loaded]
    for path, (_, other, _) in zip(paths[1:], loaded[1:]):
        for what, mine, theirs in (("source", dm.src_tok, other.src_tok), ("target", dm.tgt_tok, other.tgt_tok)):
            if theirs.to_str() != mine.to_str():
                raise TranslateError(f"--ensemble {path}: its {what} tokenizer differs from that of "
                                     f"{paths[0]}; an ensemble's members share their token ids")
    if len(paths) > 1:
        from attnflow.models.ensemble import Ensemble

        model = Ensemble([m for m, _, _ in loaded]).eval()
    return model, dm, configs


def decoding_settings(paths: Sequence[Path], configs: Sequence, beam: Optional[int],
                      length_penalty: Optional[float]) -> Tuple[int, float]:
    """(beam, α): the options where given, else how the first run's test step decoded (its
    task's ``beam_size``, ``length_penalty``; without beam search 1 and 0.6); an ensemble member
    that decoded otherwise is one warning."""
    own = [TASKS.validate(cfg["task"], "task") if cfg.get("task") else {} for cfg in configs]
    own = [{"beam": int(t.get("beam_size", 1)), "length_penalty": float(t.get("length_penalty", 0.6))}
           for t in own]
    given = {"beam": beam, "length_penalty": length_penalty}
    unread = [f"{path} (task.{'beam_size' if key == 'beam' else key} {s[key]:g})"
              for key, value in given.items() if value is None
              for path, s in zip(paths[1:], own[1:]) if s[key] != own[0][key]]
    given = {k: own[0][k] if v is None else v for k, v in given.items()}
    if unread:
        warnings.warn(f"--ensemble {', '.join(unread)}: not read; the first run's decoding applies "
                      f"(beam {given['beam']:g}, length penalty {given['length_penalty']:g}; "
                      f"--beam and --length-penalty choose)", AttnflowWarning)
    return int(given["beam"]), float(given["length_penalty"])


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
    from attnflow.tasks import seq2seq_inference as mt  # torch: once the options are checked

    max_len, limit, heat_maps = args.max_len or dm.max_decode_len, dm.max_src_len, []

    def step(chunk, first):
        ids, full = mt.encode(dm, chunk)
        rows, w = mt.decode_ids(model, ids, beam, length_penalty, max_len,
                                need_weights=bool(args.attention), batch_size=args.batch_size)
        if args.attention:
            heat_maps.extend((*m, line) for m, line in zip(mt.heat_maps(model, dm, w, ids, rows), chunk)
                             if m)
        arrays = {}
        for j, (s, r, maps) in enumerate(zip(ids, rows, mt.attention_arrays(model, ids, rows)), first) \
                if args.save_attention else ():
            arrays.update({f"{j}/source": text_array(mt.tokens(dm.src_tok, s)),
                           f"{j}/output": text_array(mt.tokens(dm.tgt_tok, r)),
                           **{f"{j}/{k}": v for k, v in maps.items()}})
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


def main(argv: Optional[List[str]] = None) -> int:
    bound_primitive_cache()  # before any tensor work: oneDNN reads it once
    plain_warnings()
    args = _parser().parse_intermixed_args(argv)  # options before or after the sentences
    try:
        _check_options(args)
        lines, where = read_texts(args, args.sentences, None, "-f")
        paths = [Path(p) for p in [args.run, *args.ensemble]]
        model, dm, configs = load_members(paths, args.device)
        beam, length_penalty = decoding_settings(paths, configs, args.beam, args.length_penalty)
        heat_maps = _translate_all(args, lines, where, model, dm, beam, length_penalty)
        if args.attention:
            _draw(args, heat_maps)
    except (TranslateError, PredictError, CheckpointError, InputError, ConfigError, OSError) as err:
        print(f"attnflow-translate: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
