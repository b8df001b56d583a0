"""attnflow-predict: label documents, texts (BERT) or graph nodes with a trained run, and explain them.

    attnflow-predict RUN "A great film." "Dull." --explain out.html   # documents: words' weights
    attnflow-predict RUN --file reviews.jsonl.gz --json             # one input per line or row (or stdin)
    attnflow-predict GAT_RUN --explain --top-k 5 -o nodes.csv        # graph nodes, top neighbours
    attnflow-predict BERT_PRETRAINING_RUN "The film was [MASK] ." --top-k 5   # fill [MASK] tokens
    attnflow-predict MULTITASK_RUN "A great film."                   # a label per task
    attnflow-predict TOKEN_RUN "Anna lives in Paris ." --json          # a tag per word (NER)
    attnflow-predict CAPTION_RUN photo.png --attention out.png       # caption, where words looked
    attnflow-predict RUN ... --save-attention attn.npz               # attention maps as data

The run's kind (its model's or data's ``interface``) chooses what is done; the model is rebuilt
from the config stored in the checkpoint (a run directory: its best checkpoint, else
``last.ckpt``). A bad path or checkpoint, or an output that exists: one message, exit status 2;
an option the run's kind leaves unread: one warning. Documents and texts give one line per input
line, ``label<TAB>probability<TAB>text`` (``--json``: JSON lines; an empty line: ``-``), inputs
over the run's caps cut as in training, with a note; token-classification runs give
``word/TAG word/TAG …`` per line (:mod:`attnflow.cli.predict_text`). Graphs give CSV, one
row per node: ``node,label,prob,prob_<class>…`` and with ``--explain`` the ``--top-k`` sources of
the largest α of the last layer, averaged over heads. ``--save-attention`` holds ``kind``, ``lines`` and per
input i its maps (documents ``{i}/words``, ``{i}/word_weights``, ``{i}/sent_weights`` or
``{i}/hops``; texts ``{i}/tokens``, ``{i}/cls_attention`` (N, J, T); images ``{i}/words``,
``{i}/alpha`` (T, h, w)), or for a graph ``layer{k}/edge_index`` and ``layer{k}/alpha`` (E′, J).
"""

from __future__ import annotations

import argparse
import csv
import sys
import warnings
from contextlib import contextmanager
from typing import List, Optional

import attnflow  # noqa: F401  (the ${attnflow_root:} resolver of conf/paths)
from attnflow.cli.predict_io import BATCH_SIZE, label_all, label_line, positive, read_texts
from attnflow.cli.tool import run_tool
from attnflow.config.registry import AttnflowWarning
from attnflow.inference.runs import InferenceError, open_run, run_interface
from attnflow.io.checkpoints import Run
from attnflow.io.console import warn_unread
from attnflow.io.text import atomic_path, check_new_outputs, check_npz, path_arg, save_arrays
from attnflow.viz.explain import write_html

# the options each kind of run leaves unread ("inputs": texts as arguments or --file)
UNREAD = {"documents": ("--top-k", "--beam", "--attention"),
          "graph": ("inputs", "--json", "--batch-size", "--beam", "--attention"),
          "text_classification": ("--top-k", "--beam", "--attention"),
          "pretraining": ("--beam", "--attention"),
          "token_classification": ("--explain", "--top-k", "--beam", "--attention"),
          "captioning": ("--explain", "--top-k"),
          "multitask": ("--top-k", "--beam", "--attention", "--explain", "--save-attention")}


def _documents(args, run: Run, out) -> int:
    from attnflow.inference import documents as docs  # torch: once the options are checked

    task, art = docs.load(args.model, args.device, run)
    texts, where = read_texts(args, args.texts, art.get("text_field", "text"))
    caps, explained = f"{art['max_sentences']} sentences of {art['max_words']} words", []

    def step(chunk, first):
        arrays = {} if args.save_attention else None
        results = docs.predict(task, art, chunk, args.batch_size, arrays, first)
        explained.extend(r for r in results if args.explain and not r["empty"])
        return results, arrays or {}

    def note(r, _):
        return (f"has {r['n_sentences']} sentences and {r['size']} words; the model reads at most "
                f"{caps} (the run's data.max_sentences, data.max_words): {r['sentences_cut']} "
                f"sentences and {r['cut']} of {r['size']} words cut"
                if r["cut"] or r["sentences_cut"] else None)

    label_all(args, out, texts, where, step, lambda r: label_line(r, args.json), note,
              what="documents", caps=caps + ": {cut} of {size} words", kind="documents",
              empty="no words to classify ('-' is written in its place)")
    if args.explain:
        for r in explained:
            r["title"] = f"predicted {r['label']} (p={r['probability']:.3f})"
        print(f"explanation written to {write_html(args.explain, explained, 'attnflow-predict')}",
              file=sys.stderr)
    return 0


def _graph(args, run: Run, out) -> int:
    if isinstance(args.explain, str):
        warn_unread(f"--explain {args.explain}", "a graph run adds the neighbours column to the CSV")
    from attnflow.inference.graphs import graph_arrays, predict_nodes  # torch: after the checks

    g = predict_nodes(run, args.device, (args.top_k or 5) if args.explain else None)
    nodes, labels, probs = g["nodes"], g["labels"], g["probs"]
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["node", "label", "prob", *(f"prob_{c}" for c in g["names"])]
                    + ["neighbours"] * bool(args.explain))
    for t, (row, top) in enumerate(zip(probs.tolist(), probs.max(-1).values.tolist())):
        writer.writerow([nodes[t], labels[t], f"{top:.4f}", *(f"{p:.4f}" for p in row), *g["neighbours"][t]])
    out.flush()
    if args.save_attention:
        arrays = graph_arrays(g["weights"], len(nodes))
        print(f"attnflow-predict: attention of {len(g['weights'])} layers written to "
              f"{save_arrays(args.save_attention, arrays)}", file=sys.stderr)
    return 0


def _bert_handlers() -> dict:
    """The handlers of BERT and captioning runs (torch and the tokenizers: after the checks)."""
    from attnflow.cli import predict_image, predict_text

    return {"text_classification": predict_text.predict_bert, "pretraining": predict_text.predict_bert,
            "token_classification": predict_text.predict_tokens,
            "captioning": predict_image.predict_captions, "multitask": predict_text.predict_multitask}


@contextmanager
def _output(path: Optional[str]):
    """stdout, or ``-o FILE`` moved into place at the end (a failed run leaves FILE as it was)."""
    if not path:
        yield sys.stdout
        return
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8", newline="") as f:
        yield f


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="attnflow-predict", description=__doc__.split("\n\n")[0])
    p.add_argument("model", type=path_arg, help="a run directory or a .ckpt file")
    p.add_argument("texts", nargs="*", help="documents or texts to label, or images to caption "
                                           "(default: --file, else stdin)")
    p.add_argument("--file", type=path_arg, help="one input per line (.gz; .jsonl, .csv, .tsv, "
                                                 ".parquet: the run's text field)")
    p.add_argument("--explain", nargs="?", const=True, metavar="OUT.html", type=path_arg,
                   help="documents, texts: write the attention weights as HTML; graphs: list "
                        "each node's top-weighted neighbours")
    p.add_argument("--top-k", type=positive, default=None,
                   help="graphs: neighbours listed; pretraining runs: candidates per [MASK] (5)")
    p.add_argument("--json", action="store_true", help="documents and texts: print JSON lines")
    p.add_argument("-o", "--output", type=path_arg, help="write the predictions here")
    p.add_argument("--save-attention", metavar="OUT.npz", type=path_arg,
                   help="write the attention maps as arrays")
    p.add_argument("--beam", type=positive, default=None, metavar="K",
                   help="captioning runs: beam size (default: the run's task.beam_size)")
    p.add_argument("--attention", metavar="OUT.png", type=path_arg,
                   help="captioning runs: draw each word's attention over the image")
    p.add_argument("--batch-size", type=positive, default=None,
                   help=f"inputs through the model together (default {BATCH_SIZE})")
    p.add_argument("--device", default="cpu")
    return p


def _drop_unread(args, kind: str, run: Run) -> None:
    """The options a run of ``kind`` leaves unread: one warning naming them, then unset."""
    given = {o: args.texts or args.file if o == "inputs" else vars(args)[o[2:].replace("-", "_")]
             for o in UNREAD[kind]}
    unread = [o for o, value in given.items() if value not in (None, False, [])]
    if kind == "graph" and args.top_k and not args.explain:
        unread.append("--top-k (without --explain)")
    if unread:
        names = ["texts and --file" if o == "inputs" else o for o in unread]
        warnings.warn(f"{', '.join(names)}: not read for the run at {run.run_dir}, which works on "
                      f"{kind}", AttnflowWarning)
    for o in unread:
        if o != "inputs":
            setattr(args, o.split()[0][2:].replace("-", "_"), False if o == "--json" else None)
    if kind != "graph" and args.batch_size is None:
        args.batch_size = BATCH_SIZE


def _predict(args) -> int:
    if args.save_attention:
        check_npz(args.save_attention)
    check_new_outputs(("-o", args.output), ("--save-attention", args.save_attention),
                      ("--explain", args.explain), ("--attention", args.attention))
    run = open_run(args.model, args.device)
    kind = run_interface(run)
    if kind not in UNREAD:
        tool = " (translation runs: attnflow-translate)" if kind == "seq2seq" else ""
        raise InferenceError(f"the run at {run.run_dir} works on {kind or 'unknown data'}; "
                             f"attnflow-predict labels documents, graph nodes and texts (BERT "
                             f"runs: text_classification, token_classification, "
                             f"bert_pretraining, multitask) and captions images{tool}")
    _drop_unread(args, kind, run)
    if args.explain is True and kind != "graph":  # documents, texts: the HTML page to write
        raise InferenceError(f"--explain takes the HTML file to write for "
                             f"{'documents' if kind == 'documents' else 'texts'} (--explain OUT.html)")
    with _output(args.output) as out:
        handler = {"documents": _documents, "graph": _graph}.get(kind) or _bert_handlers()[kind]
        return handler(args, run, out)


def main(argv: Optional[List[str]] = None) -> int:
    return run_tool(_parser(), argv, _predict, (OSError, ValueError))


if __name__ == "__main__":
    sys.exit(main())
