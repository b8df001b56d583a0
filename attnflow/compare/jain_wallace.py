"""Jain & Wallace (2019), "Attention is not Explanation" (NAACL): two diagnostics of a
classifier's attention, per example.

- Kendall τ (τ-b) between the attention weights over the example's input positions and the
  positions' gradient importance g_t = |∇_{e_t} ŷ · e_t| (§4.1): ŷ is the predicted class's
  probability (J&W take the gradient of the output), e_t the input embedding at position t
  (gradient × input summed over the embedding dimension: the gradient with respect to the one-hot
  input at the present token), computed with the diagnosed attention weights detached from the
  graph, as J&W disconnect it at the attention layer. Fewer than 2 positions or a constant
  vector: NaN, left out of the median.
- TVD(ŷ, ŷ′) = ½ Σ_c |ŷ_c − ŷ′_c| between the output class distribution and the one with the
  diagnosed attention weights randomly permuted over the valid positions (§4.2), per example the
  median over the permutations. Multi-label outputs (sigmoids): the mean over classes of the
  Bernoulli distributions' TVD |ŷ_c − ŷ′_c|.

Which attention is diagnosed is the model's own declaration (:class:`Diagnosable`); permuting
and detaching go through its normalisers (:mod:`attnflow.compare.tampered`). How τ's positions
line up differs per kind of attention (the ``_*_pairs`` functions): HAN's word × sentence
weights over the document's words, the self-attentive hops over its words (τ: the mean over
hops), BERT's ⟨CLS⟩ row (mean over heads) over the tokens, GAT's last-layer α (mean over heads)
over a node's neighbours, whose importance is |∇_{x_i} ŷ_t · x_i| over the input features.
"""

from __future__ import annotations

import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Protocol, Sequence, Tuple, runtime_checkable

import numpy as np
import torch
from scipy.stats import kendalltau
from torch import nn

from attnflow.compare.tampered import tampered

Declared = Tuple[str, nn.Module, Optional[Sequence[int]]]


@runtime_checkable
class Diagnosable(Protocol):
    """A model that offers attention for diagnosis: ``diagnosed_attention()`` lists ``(kind,
    owner, rows)``: ``owner.normalizer`` makes the weights, ``rows`` the query rows diagnosed
    (None: all). Kinds: ``word`` and ``sentence`` (HAN), ``hops`` (self-attentive), ``cls``
    (BERT, head 'sequence'), ``neighbours`` (GAT). An empty list: nothing to diagnose."""

    def diagnosed_attention(self) -> List[Declared]: ...


@dataclass
class Pass:
    """One forward pass: class probabilities (n, C) of the examples, the input ``leaf`` whose
    gradient × input is the importance, and for graphs the example nodes and the last layer's
    edges (with self-loops)."""

    probs: torch.Tensor
    leaf: torch.Tensor
    nodes: Optional[torch.Tensor] = None
    edges: Optional[torch.Tensor] = None
    multi_label: bool = False  # sigmoid outputs: TVD the mean over classes


# -- forward passes, per task interface --------------------------------------------------------------
@contextmanager
def _captured(module: nn.Module, leaves: List[torch.Tensor]):
    """``module``'s output replaced by a leaf tensor (appended to ``leaves``) whose gradient is
    the gradient with respect to the embedding, whether or not the weights train."""

    def hook(_module, _args, out):
        leaf = out.detach().requires_grad_(torch.is_grad_enabled())
        leaves.append(leaf)
        return leaf

    handle = module.register_forward_hook(hook)
    try:
        yield
    finally:
        handle.remove()


def _probabilities(logits: torch.Tensor, multi_label: bool) -> torch.Tensor:
    logits = logits.float()
    return torch.sigmoid(logits) if multi_label else torch.softmax(logits, -1)


def _graph_pass(task: Any, batch: dict) -> Pass:
    data, nodes = batch["graph"], batch["nodes"].to(task.device)
    x = task.features(data.x).detach().requires_grad_(torch.is_grad_enabled())
    logits, weights = task.model(x, data.edge_index.to(task.device), need_weights=True)
    return Pass(_probabilities(logits[nodes], task.multi_label), x, nodes, weights[-1][0],
                task.multi_label)


def _embedded_pass(task: Any, batch: dict) -> Pass:
    """Documents (HAN, self-attentive: ``model.embedding``) and texts (BERT:
    ``model.token_embedding``)."""
    model, leaves = task.model, []
    module = model.embedding if task.interface == "documents" else model.token_embedding
    with _captured(module, leaves):
        out = task({k: v.to(task.device) if torch.is_tensor(v) else v for k, v in batch.items()})
    logits = out["logits"] if isinstance(out, dict) else out
    return Pass(_probabilities(logits, False), leaves[0])


PASSES: Dict[str, Callable[[Any, dict], Pass]] = {
    "documents": _embedded_pass, "text_classification": _embedded_pass, "graph": _graph_pass}


# -- τ's positions, per kind of attention ------------------------------------------------------------
# each: (records {kind: (weights, valid or index)}, importance, pass) -> per example
# (attention (R, n) — R rows, τ their mean —, importance (n,))
Pairs = List[Tuple[torch.Tensor, torch.Tensor]]


def _han_pairs(records: dict, importance: torch.Tensor, run: Pass) -> Pairs:
    """α_word(t) · α_sent(sentence of t) over the document's words."""
    (word, valid), (sent, _) = records["word"], records["sentence"]
    B, S = sent.shape
    effective = word.view(B, S, -1) * sent.unsqueeze(-1)
    valid, g = valid.view(B, S, -1), importance.view(B, S, -1)
    return [(effective[b][valid[b]][None], g[b][valid[b]]) for b in range(B)]


def _hops_pairs(records: dict, importance: torch.Tensor, run: Pass) -> Pairs:
    """Each hop over the document's words (flat, as the model packs them)."""
    A, valid = records["hops"]                                           # (B, r, N)
    return [(A[b][:, valid[b, 0]], importance[b][valid[b, 0]]) for b in range(A.shape[0])]


def _cls_pairs(records: dict, importance: torch.Tensor, run: Pass) -> Pairs:
    """The ⟨CLS⟩ row, mean over heads, over the valid tokens (⟨CLS⟩ and ⟨SEP⟩ included)."""
    w, valid = records["cls"]
    if w.dim() == 3:  # one head ('single' attention): (B, T, T)
        w, valid = w.unsqueeze(1), valid.unsqueeze(1)
    row, keep = w[:, :, 0].mean(1), valid[:, 0, 0]
    return [(row[b][keep[b]][None], importance[b][keep[b]]) for b in range(row.shape[0])]


def _neighbour_pairs(records: dict, importance: torch.Tensor, run: Pass) -> Pairs:
    """Node t's incoming edges (self-loop included): α (mean over heads) and the sources'
    importance for ŷ_t."""
    alpha, dst = records["neighbours"]
    alpha, src = alpha.mean(-1), run.edges[0]
    pairs = []
    for k, t in enumerate(run.nodes.tolist()):  # one example per node
        into = dst == t
        pairs.append((alpha[into][None], importance[k][src[into]]))
    return pairs


FAMILIES: Dict[frozenset, Tuple[Callable, str]] = {
    frozenset({"word", "sentence"}): (_han_pairs, "the word attention within each sentence and the "
                                                  "sentence attention over the document's sentences"),
    frozenset({"hops"}): (_hops_pairs, "each attention hop over the document's words"),
    frozenset({"cls"}): (_cls_pairs, "the last layer's ⟨CLS⟩ attention row, each head over the "
                                     "valid tokens"),
    frozenset({"neighbours"}): (_neighbour_pairs, "the last layer's α, each head within each "
                                                  "node's incoming edges (self-loop included)"),
}


# -- the statistics ---------------------------------------------------------------------------------
def kendall_tau(a: Any, b: Any) -> float:
    """Kendall's τ-b of two vectors; NaN for fewer than 2 positions or a constant vector."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if len(a) < 2 or np.all(a == a[0]) or np.all(b == b[0]):
        return float("nan")
    return float(kendalltau(a, b)[0])


def total_variation(p: torch.Tensor, q: torch.Tensor, multi_label: bool = False) -> torch.Tensor:
    """(n,): ½ Σ_c |p_c − q_c| of two (n, C) class distributions; multi-label: the mean over
    classes of |p_c − q_c| (each class a Bernoulli distribution)."""
    diff = (p - q).abs()
    return diff.mean(-1) if multi_label else 0.5 * diff.sum(-1)


def _importance(task: Any, batch: dict, owners: list) -> Tuple[Pass, torch.Tensor, list]:
    """(pass, g (n, …) per example and position, the detached normalisers' records)."""
    run_pass = PASSES[task.interface]
    with torch.enable_grad(), tampered(owners, "detach") as wrappers:
        run = run_pass(task, batch)
        top = run.probs.max(-1).values                                # ŷ of the predicted class
        if run.nodes is None:  # independent examples: one backward of the sum
            grads = torch.autograd.grad(top.sum(), run.leaf)[0].unsqueeze(0)
        else:  # one graph: one backward per example node
            grads = torch.stack([torch.autograd.grad(y, run.leaf, retain_graph=True)[0]
                                 for y in top])
    g = (grads.float() * run.leaf.detach().float()).sum(-1).abs()
    return run, (g[0] if run.nodes is None else g), [w.records[-1] for w in wrappers]


def _taus(task: Any, batch: dict, declared: List[Declared], pairs_of: Callable) -> List[float]:
    run, importance, records = _importance(task, batch, [(m, rows) for _, m, rows in declared])
    by_kind = {kind: rec for (kind, _, _), rec in zip(declared, records)}
    taus = []
    for attention, g in pairs_of(by_kind, importance, run):
        rows = [kendall_tau(a.float().cpu(), g.cpu()) for a in attention]
        taus.append(float(np.mean(rows)) if rows and not np.all(np.isnan(rows))
                    else float("nan"))
    return taus


@torch.no_grad()
def _tvds(task: Any, batch: dict, owners: list, permutations: int,
          generator: torch.Generator) -> np.ndarray:
    """(n,): per example the median TVD over the permutations."""
    run_pass = PASSES[task.interface]
    first = run_pass(task, batch)
    base, multi = first.probs, first.multi_label
    with tampered(owners, "permute", generator, record=False):
        diffs = [total_variation(base, run_pass(task, batch).probs, multi)
                 for _ in range(permutations)]
    return np.median(torch.stack(diffs).cpu().numpy(), axis=0)


def _declared(task: Any) -> List[Declared]:
    if not isinstance(task.model, Diagnosable) or task.interface not in PASSES:
        return []
    return list(task.model.diagnosed_attention())


def jain_wallace(task, batch, permutations: int = 20, seed: int = 0) -> Optional[dict]:
    """{"kendall_tau": median over examples, "tvd": median over examples (each example's median over
    the permutations), "examples": [{"kendall_tau": float, "tvd": float}, ...] in batch order,
    "permuted": "<one line saying what was permuted>"}; None when the task's model offers no
    diagnosed attention (e.g. mean pooling, a translation task)."""
    declared = _declared(task)
    family = FAMILIES.get(frozenset(kind for kind, _, _ in declared))
    if not declared or family is None:
        return None
    if permutations < 1:
        raise ValueError(f"jain_wallace: permutations={permutations}, need at least 1")
    pairs_of, what = family
    device = next(task.model.parameters()).device
    generator = torch.Generator(device=device).manual_seed(seed)
    with task.eval_mode(), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # nanmedian of all-NaN τ: NaN
        taus = _taus(task, batch, declared, pairs_of)
        tvds = _tvds(task, batch, [(m, rows) for _, m, rows in declared], permutations, generator)
        tau = float(np.nanmedian(taus)) if taus else float("nan")
    return {"kendall_tau": tau, "tvd": float(np.median(tvds)),
            "examples": [{"kendall_tau": t, "tvd": float(d)} for t, d in zip(taus, tvds)],
            "permuted": f"randomly permuted ({permutations}×, seed {seed}): {what}"}
