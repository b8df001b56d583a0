"""Views of documents (HAN, self-attentive) and of BERT's texts and tagged sentences, for
:func:`attnflow.compare.collect.collect`: each example's title is its truth (the true class or
tags), its prediction what the run predicts, its picture what the run's dashboard draws."""

from __future__ import annotations

from typing import List, Optional

import numpy as np
import torch

from attnflow.compare.views import ExampleViews, View, example_keys, pick
from attnflow.tasks.classification import ClassificationTask
from attnflow.tasks.text_classification import TextClassificationTask
from attnflow.tasks.token_classification import TokenClassificationTask
from attnflow.viz.explain import join_pieces
from attnflow.viz.figures import attention_figure, cls_attention_figure, cls_rows, figure_png


# -- documents ---------------------------------------------------------------------------------------
def _han_views(out: dict, doc: dict) -> List[View]:
    """``word`` (rows: the sentences, each over its words) and ``sentence`` (one row over the
    sentences), each where the model pools by attention."""
    sentences = doc["sentences"]
    names = [f"s{i + 1}" for i in range(len(sentences))]
    views = []
    if out.get("word_weights") is not None:
        grid = np.zeros((1, len(sentences), max(len(s) for s in sentences)), np.float32)
        for r, w in enumerate(doc["word_weights"]):
            grid[0, r, : len(w)] = w
        views.append(View.build("word", 0, 1, grid, names, sentences))
    if doc["sent_weights"] is not None:
        views.append(View.build("sentence", 0, 1, np.asarray(doc["sent_weights"])[None, None],
                                ["document"], [names]))
    return views


def _hop_picture(doc: dict, view: View, head: Optional[int]) -> dict:
    """``doc`` with its word weights those of hop ``head`` (the mean of the hops for None),
    split back into its sentences."""
    flat = view.matrix(head)[0].tolist()
    ends = np.cumsum([len(s) for s in doc["sentences"]]).tolist()
    return {**doc, "word_weights": [flat[a:b] for a, b in zip([0] + ends[:-1], ends)]}


def collect_documents(task: ClassificationTask, batch, layer, head, keys) -> List[ExampleViews]:
    """HAN: ``word`` and ``sentence``; self-attentive: ``hops`` (r heads, one row over the
    document's words in reading order); mean or max pooling: none. Pictured as the dashboard."""
    out = task.outputs(batch)
    docs = task.titled_examples(batch, out)
    hops = out.get("attention")
    result = []
    for b, (key, doc, y) in enumerate(zip(example_keys(len(docs), keys), docs, batch["labels"].tolist())):
        views, shown, hop = [], doc, None
        if doc["sentences"] and hops is not None:
            words = [w for s in doc["sentences"] for w in s]
            views = [View.build("hops", 0, 1, hops[b, :, None], ["document"], [words])]
            shown, hop = _hop_picture(doc, views[0], head), views[0].head_of(head)
        elif doc["sentences"]:
            views = _han_views(out, doc)
        fig, title = task.document_picture(shown, hop)
        truth = (f"true {task.class_names[y]}" if y >= 0  # (y < 0: a text of your own)
                 else " ".join(w for s in doc["sentences"] for w in s)[:120])
        result.append(ExampleViews(key, truth, views, figure_png(fig), title,
                                   prediction=f"{doc['label']} (p={doc['probability']:.3f})"))
    return result


# -- BERT ------------------------------------------------------------------------------------------
def _with_heads(m: torch.Tensor) -> torch.Tensor:
    """A layer's attention as (B, J, T, T) (one head's (B, T, T) gets J = 1)."""
    return m if m.dim() == 4 else m.unsqueeze(1)


def _row_name(view: View, head: Optional[int]) -> str:
    shown = view.head_of(head)
    return f"L{view.layer + 1} " + ("mean" if shown is None else f"h{shown + 1}")


def collect_texts(task: TextClassificationTask, batch, layer, head, keys) -> List[ExampleViews]:
    """BERT text classification: ``cls`` per layer, (heads, 1, T): the ⟨CLS⟩ row of its
    self-attention over the T real tokens; pictured: the chosen layer's and head's row."""
    maps, probs = task.attention(batch)
    lengths = batch["attention_mask"].sum(-1).tolist()
    tokens = task.token_strings(batch["input_ids"].cpu(), lengths)
    titles, labels = task.titles(batch["labels"], probs), batch["labels"].tolist()
    cls = cls_rows(maps).cpu()  # (B, N, J, T)
    out = []
    for i, key in enumerate(example_keys(len(tokens), keys)):
        views = [View.build("cls", l, len(maps), cls[i, l, :, None], tokens[i][:1], [tokens[i]])
                 for l in range(len(maps))]
        shown = pick(views, "cls", layer)
        what, k = shown.label(head), int(probs[i].argmax())
        fig = cls_attention_figure(shown.matrix(head)[None], tokens[i], f"{titles[i]} · {what}",
                                   row_names=[_row_name(shown, head)])
        truth = (f"true {task.class_names[labels[i]]}" if labels[i] >= 0
                 else join_pieces(tokens[i], ("[PAD]", "[CLS]", "[SEP]"))[:120])
        out.append(ExampleViews(key, truth, views, figure_png(fig),
                                f"{what} of [CLS] over the text",
                                prediction=f"{task.class_names[k]} (p={float(probs[i, k]):.3f})"))
    return out


def collect_tagged(task: TokenClassificationTask, batch, layer, head, keys) -> List[ExampleViews]:
    """BERT token tagging: ``self`` per layer, (heads, T, T) over the real tokens; pictured:
    the chosen layer and head, token × token, titled with the predicted tags."""
    maps, sentences = task.tagged(batch)
    maps = [_with_heads(m).float().cpu() for m in maps]
    out = []
    for i, (key, s) in enumerate(zip(example_keys(len(sentences), keys), sentences)):
        toks = s["tokens"]
        views = [View.build("self", l, len(maps), m[i], toks, [toks] * len(toks)) for l, m in enumerate(maps)]
        shown = pick(views, "self", layer)
        what = shown.label(head)
        fig = attention_figure(shown.matrix(head), toks, toks, s["title"][:90], label=what)
        out.append(ExampleViews(key, " ".join(f"{w}/{t}" for w, t in zip(s["words"], s["tags"])), views,
                                figure_png(fig), f"{what}, token × token",
                                prediction=" ".join(s["predicted"])))
    return out
