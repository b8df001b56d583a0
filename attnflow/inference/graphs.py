"""Node classifiers applied: the run's model and graph rebuilt, every node labelled, with the
sources of its largest attention weights and each layer's α as arrays."""

from __future__ import annotations

from typing import Dict, List, Optional

import numpy as np
import torch

from attnflow.inference.runs import data_module, rebuild
from attnflow.io.checkpoints import Run
from attnflow.data.graph import class_names
from attnflow.io.labels import label_list
from attnflow.tasks.node_classification import top_neighbours


def load_graph(run: Run, device: str = "cpu"):
    """(model, graph) of a node-classification run, the graph from the run's data config."""
    cfg, dm = run.config, data_module(run)
    ctx = dm.model_context()
    return rebuild(run, ctx, f" on data '{cfg['data'].get('name')}' ({ctx['in_dim']} features, "
                   f"{ctx['num_classes']} classes)", device=device), dm.full_graph()


@torch.no_grad()
def predict_nodes(run: Run, device: str = "cpu", top_k: Optional[int] = None) -> dict:
    """Every node of the run's graph: ``nodes`` (the files' ids, else 0…N-1), ``names`` (the
    classes), ``probs`` (N, C) (sigmoid for a multi-label task), ``labels`` (multi-label: the
    classes over 0.5 joined by ``|``), ``neighbours`` (with ``top_k``: per node the ``top_k``
    sources of the largest α of the last layer, averaged over heads, as ``id:α …``) and
    ``weights`` (per layer its edge index and α)."""
    model, data = load_graph(run, device)
    logits, weights = model(data.x.to(device), data.edge_index.to(device), need_weights=True)
    multi = bool(run.config.get("task", {}).get("multi_label", False))
    probs = logits.float().cpu().sigmoid() if multi else logits.float().cpu().softmax(-1)
    N, C = probs.shape
    names = label_list(run.run_dir, C) or class_names(data, C)
    nodes = list(data.node_ids if "node_ids" in data else range(N))
    labels = (["|".join(n for n, on in zip(names, row) if on) for row in (probs > 0.5).tolist()]
              if multi else [names[i] for i in probs.argmax(-1).tolist()])
    neighbours: List[List[str]] = [[] for _ in range(N)]
    if top_k:
        ei, alpha = weights[-1]
        ids, w = top_neighbours(ei.cpu(), alpha.float().mean(-1).cpu(), N, top_k)
        neighbours = [[" ".join(f"{nodes[i]}:{a:.4f}" for i, a in zip(ri, rw) if i >= 0)]
                      for ri, rw in zip(ids.tolist(), w.tolist())]
    return {"nodes": nodes, "names": names, "probs": probs, "labels": labels,
            "neighbours": neighbours, "weights": weights}


def graph_arrays(weights: list, num_nodes: int) -> Dict[str, np.ndarray]:
    """``--save-attention``'s arrays of a graph: per layer k ``layer{k}/edge_index`` and
    ``layer{k}/alpha`` (E′, J)."""
    return {"kind": np.asarray("graph"), "num_nodes": np.asarray(num_nodes),
            **{f"layer{k}/{name}": v for k, (ei, alpha) in enumerate(weights) for name, v in
               (("edge_index", ei.cpu().numpy()), ("alpha", alpha.float().cpu().numpy()))}}
