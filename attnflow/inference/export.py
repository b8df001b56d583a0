"""Trained runs written in other formats: a BERT run as a Hugging Face model directory
(transformers' ``AutoModelFor…`` and ``AutoTokenizer`` load it), any run of texts, documents,
graphs or translation as an ONNX file of its model (or MT encoder), traced on an example and
checked against the model where onnxruntime is installed. The ONNX inputs and outputs (a BERT
run's named and typed as Hugging Face's, so code that feeds an HF ONNX model feeds it):

    texts      input_ids, token_type_ids, attention_mask (B, T) int64 -> logits (B, C) or (B, T, C)
    documents  tokens (B, S, W) int64, sent_lengths (B, S) int64 -> logits (B, C)
    graph      x (N, F) float, edge_index (2, E) int64 -> logits (N, C)
    seq2seq    src (B, S) int64, src_lengths (B,) int64 -> memory (B, S, d)
"""

from __future__ import annotations

import json
import shutil
import tempfile
import warnings
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np
import torch

from attnflow.config.registry import ATTENTIONS, MODELS, POSITIONALS
from attnflow.data.corpus import save_hf_tokenizer
from attnflow.inference import documents, graphs, translation
from attnflow.inference.runs import InferenceError
from attnflow.inference.texts import load_bert
from attnflow.io.checkpoints import Run
from attnflow.models import bert_hf

BERT_KINDS = ("text_classification", "token_classification", "pretraining")
OPSET = 18  # ScatterElements with max reduction: the graph layers' segment softmax


def export_hf(run: Run, kind: str, folder: Path) -> Path:
    """The BERT run as an HF model directory (module docstring), written whole or not at all."""
    from safetensors.torch import save_file  # not a dependency of attnflow: transformers' own

    if kind not in BERT_KINDS or run.config["model"].get("name") != "bert":
        raise InferenceError(f"the run at {run.run_dir} is a '{run.config['model'].get('name')}' run "
                             f"on {kind}; --to hf exports BERT runs (--to onnx: the others)")
    bert = load_bert(run)
    model_cfg = MODELS.validate(run.config["model"], "model")
    model_cfg["attention"] = ATTENTIONS.validate(model_cfg["attention"], "model.attention")
    model_cfg["positional"] = POSITIONALS.validate(model_cfg["positional"], "model.positional")
    config = bert_hf.hf_config(model_cfg, bert.tokenizer.get_vocab_size(), bert.class_names)
    tmp = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}."))
    try:
        (tmp / "config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
        with torch.no_grad():
            save_file(bert_hf.to_hf(bert.model.state_dict(), bert.model.head), tmp / "model.safetensors",
                      metadata={"format": "pt"})
        save_hf_tokenizer(bert.tokenizer, tmp, bert.max_len)
        tmp.rename(folder)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return folder


# -- ONNX: per kind of run (fn, example inputs, dynamic axes of inputs and output, model) -------
def _bert_example(run: Run):
    bert = load_bert(run)
    ids = np.minimum([[2, 7, 8, 9, 10, 3], [2, 11, 12, 3, 0, 0]], len(bert.itos) - 1)
    head = bert.model.head
    if head not in ("sequence", "token"):
        raise InferenceError(f"--to onnx exports BERT classifiers (model.head sequence or token); "
                             f"the run at {run.run_dir} has model.head={head}")
    out = bert.model.classify_logits if head == "sequence" else bert.model.token_logits
    length = {0: "batch", 1: "length"}
    return (lambda i, t, m: out(bert.model(i, t, m != 0))), (ids, np.zeros_like(ids), (ids != 0).astype(np.int64)), {
        "input_ids": length, "token_type_ids": length, "attention_mask": length,
        "logits": {0: "batch", **({1: "length"} if head == "token" else {})}}, bert.model


def _documents_example(run: Run):
    task, art = documents.load(run.checkpoint, run=run)
    tokens = np.minimum([[[2, 3, 4, 0], [5, 6, 0, 0]], [[7, 8, 9, 10], [0, 0, 0, 0]]],
                        len(art["vocab_obj"].itos) - 1)
    return (lambda t, n: task.model(t, n)["logits"]), (tokens, (tokens != 0).sum(-1)), {
        "tokens": {0: "batch", 1: "sentences", 2: "words"},
        "sent_lengths": {0: "batch", 1: "sentences"}, "logits": {0: "batch"}}, task.model


def _graph_example(run: Run):
    model, graph = graphs.load_graph(run)
    return (lambda x, e: model(x, e)), (graph.x, graph.edge_index), {
        "x": {0: "nodes"}, "edge_index": {1: "edges"}, "logits": {0: "nodes"}}, model


def _seq2seq_example(run: Run):
    model, _, _ = translation.load(run.checkpoint, run=run)
    return (lambda s, n: model.encode(s, n)[0]), (np.array([[5, 6, 7, 8, 2], [9, 10, 2, 0, 0]]),
                                                  np.array([5, 3])), {
        "src": {0: "batch", 1: "length"}, "src_lengths": {0: "batch"},
        "memory": {0: "batch", 1: "length"}}, model


EXAMPLES: Dict[str, Callable] = {"text_classification": _bert_example,
                                 "token_classification": _bert_example,
                                 "documents": _documents_example, "graph": _graph_example,
                                 "seq2seq": _seq2seq_example}


def export_onnx(run: Run, kind: str, path: Path) -> Tuple[List[str], Optional[float]]:
    """The run's model as an ONNX file (module docstring): (its input names, the largest
    difference from the model on the traced example, None without onnxruntime)."""
    if kind not in EXAMPLES:
        raise InferenceError(f"the run at {run.run_dir} works on {kind or 'unknown data'}; --to onnx "
                             f"exports BERT classifiers, document, graph and seq2seq encoder runs")
    fn, example, axes, model = EXAMPLES[kind](run)
    example, names = tuple(torch.as_tensor(x) for x in example), list(axes)[:-1]

    class Graph(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, *inputs):
            return fn(*inputs)

    wrapper = Graph().eval()
    with tempfile.TemporaryDirectory(dir=path.parent, prefix=f".{path.name}.") as tmp, \
            warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")  # the tracer's notes on checks it leaves out
        part = Path(tmp) / path.name
        torch.onnx.export(wrapper, example, str(part), input_names=names,
                          output_names=list(axes)[-1:], dynamic_axes=axes, opset_version=OPSET,
                          dynamo=False)
        diff = _check(part, names, example, wrapper(*example))
        part.replace(path)
    return names, diff


def _check(path: Path, names: List[str], example, want) -> Optional[float]:
    try:
        import onnxruntime
    except ImportError:
        return None
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3  # (shape notes of the traced graph)
    session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    got = session.run(None, {n: t.numpy() for n, t in zip(names, example)})[0]
    return float(abs(got - want.numpy()).max())
