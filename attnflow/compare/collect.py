"""The examples of a batch as one run sees them (:class:`~attnflow.compare.views.ExampleViews`),
whatever the family: which views a task has follows from its class, so runs of different models
on the same data line up row by row. Encoder–decoders (translation, seq2seq, captioning) attend
teacher-forced on the reference, so every run's rows are the same tokens; graphs here, texts and
documents in :mod:`attnflow.compare.collect_text`."""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence

import torch

from attnflow.compare.collect_text import collect_documents, collect_tagged, collect_texts
from attnflow.compare.views import ExampleViews, View, example_keys, pick
from attnflow.inference.translation import teacher_forced_attention
from attnflow.tasks.captioning import CaptioningTask
from attnflow.tasks.classification import ClassificationTask
from attnflow.tasks.node_classification import NodeClassificationTask
from attnflow.tasks.seq2seq import Seq2SeqTask
from attnflow.tasks.text_classification import TextClassificationTask
from attnflow.tasks.token_classification import TokenClassificationTask
from attnflow.viz.figures import attention_figure, caption_figure, figure_png
from attnflow.viz.graph import heaviest, neighbourhoods


def collect(task, batch, layer: Optional[int] = None, head: Optional[int] = None,
            keys: Optional[Sequence[str]] = None) -> List[ExampleViews]:
    """Each example of ``batch`` as ``task`` sees it: every view (every kind, layer and head) and a
    PNG picture of layer ``layer`` (0-based; None: the last) and head ``head`` (0-based; None:
    the mean over heads). ``keys``: the examples' names (default ``val 0``, ``val 1``…; graphs:
    always ``node <id>``).

    A layer or head past a run's last is its last (the picture's label names what it shows), so
    one choice serves runs of different depths. Documents and graphs are pictured as their
    dashboards draw them: word and sentence α (self-attentive: hop ``head``, else the mean of
    the hops), a node's neighbours in every layer and head."""
    for family, collector in FAMILIES:  # the most specific class first
        if isinstance(task, family):
            return collector(task, batch, layer, head, keys)
    raise TypeError(f"attnflow-compare: no attention views for a {type(task).__name__} "
                    f"(interface '{task.interface}')")


# -- encoder–decoders: teacher-forced on the reference ---------------------------------------------
def _tokens(tok, ids: torch.Tensor) -> List[str]:
    return [tok(int(t)) for t in ids.tolist()]


def _encoder_decoder_views(task, maps: Dict[str, List[torch.Tensor]], batch, i: int,
                           source: List[str], cross: str = "cross") -> List[View]:
    """Example ``i``'s views of :func:`teacher_forced_attention`'s maps: rows the reference's
    tokens (through ⟨eos⟩), columns ``source``; decoder self-attention row r over the decoder's
    inputs up to r; ``cross`` names the encoder–decoder kind."""
    T = int((batch["tgt_out"][i] != task.pad_id).sum())
    target = _tokens(task.target_token, batch["tgt_out"][i, :T])
    inputs = _tokens(task.target_token, batch["tgt_in"][i, :T])
    shapes = {"encoder_self": (source, [source] * len(source)),
              "cross": (target, [source] * T),
              "decoder_self": (target, [inputs[: r + 1] for r in range(T)])}
    return [View.build(cross if kind == "cross" else kind, l, len(maps[kind]), m[i], *shapes[kind])
            for kind in ("encoder_self", "cross", "decoder_self") if kind in maps
            for l, m in enumerate(maps[kind])]


def collect_seq2seq(task: Seq2SeqTask, batch, layer, head, keys) -> List[ExampleViews]:
    """Translation and seq2seq: ``cross`` per decoder layer, for Transformers also
    ``encoder_self`` and ``decoder_self``; pictured: the chosen ``cross`` as a heat map."""
    with task.eval_mode():
        maps = teacher_forced_attention(task.model, batch["src"], batch["src_lengths"], batch["tgt_in"])
    hyps, refs = task.hypotheses(batch), task.ids_to_text(batch["tgt_out"])
    out = []
    for i, key in enumerate(example_keys(len(batch["src"]), keys)):
        ids = batch["src"][i, : int(batch["src_lengths"][i])]
        views = _encoder_decoder_views(task, maps, batch, i, _tokens(task.source_token, ids))
        ex = ExampleViews(key, task.source_text(ids.tolist()), views, prediction=hyps[i],
                          extra={"reference": refs[i]})
        shown = pick(views, "cross", layer)
        if shown is not None:
            what = shown.label(head)
            ex.picture = figure_png(attention_figure(shown.matrix(head), shown.labels[0], shown.rows,
                                                     f"{key}: {what}", label=what))
            ex.caption = f"{what} of each reference token (teacher-forced) over the source"
        out.append(ex)
    return out


def collect_captions(task: CaptioningTask, batch, layer, head, keys) -> List[ExampleViews]:
    """Captioning: ``regions`` per decoder layer (rows: the reference's words, columns: the
    regions by index); pictured: the chosen layer's α of each word over the image."""
    with task.eval_mode():
        maps = teacher_forced_attention(task.model, batch["images"], None, batch["tgt_in"])
    hyps, refs = task.hypotheses(batch), task.ids_to_text(batch["tgt_out"])
    pixels, boxes = task.canvas(batch)
    regions = [str(j) for j in range(len(boxes))]
    out = []
    for i, key in enumerate(example_keys(len(batch["images"]), keys)):
        views = _encoder_decoder_views(task, {"cross": maps["cross"]} if "cross" in maps else {},
                                       batch, i, regions, cross="regions")
        ex = ExampleViews(key, refs[i], views, prediction=hyps[i])
        shown = pick(views, "regions", layer)
        if shown is not None:
            what = shown.label(head)
            ex.picture = figure_png(caption_figure(pixels[i].float().cpu(), shown.rows, shown.matrix(head),
                                                   boxes, f"{key}, {what}; predicted: {hyps[i]}",
                                                   reference=refs[i]))
            ex.caption = f"{what} of each reference word (teacher-forced) over the image"
        out.append(ex)
    return out


# -- graphs ----------------------------------------------------------------------------------------------
def collect_nodes(task: NodeClassificationTask, batch, layer, head, keys) -> List[ExampleViews]:
    """GAT nodes, named by their ids (``keys`` unread): ``neighbours`` per layer, (heads, 1,
    in-degree): α of the node's incoming edges (its self-loop included) by neighbour id;
    pictured as the dashboard: every layer and head, the heaviest neighbours."""
    data, nodes = batch["graph"], batch["nodes"].cpu()
    _, weights, y, pred = task.predicted(data)
    names = task.class_names()
    keys = [f"node {t}" for t in nodes.tolist()]  # (a node's id names it in every run)
    out = []
    for key, t, (nbrs, alphas) in zip(keys, nodes.tolist(), neighbourhoods(weights, nodes, None)):
        labels = [str(j) for j in nbrs.tolist()]
        views = [View.build("neighbours", l, len(alphas), a.T[:, None, :], [f"node {t}"], [labels])
                 for l, a in enumerate(alphas)]
        fig, title = task.node_picture(t, *heaviest(nbrs, alphas), y, pred)
        out.append(ExampleViews(key, f"node {t} ({names[int(y[t])]})", views, figure_png(fig), title,
                                prediction=names[int(pred[t])]))
    return out


FAMILIES = ((CaptioningTask, collect_captions), (Seq2SeqTask, collect_seq2seq),
            (ClassificationTask, collect_documents), (TextClassificationTask, collect_texts),
            (TokenClassificationTask, collect_tagged), (NodeClassificationTask, collect_nodes))
