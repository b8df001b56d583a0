"""Validation examples for dashboards, spread across labels (data files are often sorted by
label, so "the first n" would show one class)."""

from __future__ import annotations

from typing import List, Optional, Sequence

import torch


def spread_over_labels(labels: Sequence[int] | torch.Tensor, n: int) -> torch.Tensor:
    """Indices of ``n`` items taken round-robin over the labels, each label's in order: labels
    [0, 0, 0, 1, 1] and n = 3 give [0, 3, 1]; on the labels' device."""
    labels = torch.as_tensor(labels).flatten()
    if n <= 0 or labels.numel() == 0:
        return torch.zeros(0, dtype=torch.long, device=labels.device)
    order = torch.argsort(labels, stable=True)                     # grouped by label, stable
    grouped = labels[order]
    place = torch.arange(len(grouped), device=labels.device)
    rank = place - torch.searchsorted(grouped, grouped)            # place in its label
    _, label_index = torch.unique(grouped, return_inverse=True)
    key = rank * (int(label_index.max()) + 1) + label_index        # by rank, then label
    return order[torch.argsort(key, stable=True)][:n]


def example_indices(size: int, n: int, ids: Optional[Sequence[int]] = None) -> List[int]:
    """The items an ``example_batch`` takes of a split of ``size``: ``ids`` where given (the same
    examples in every run compared), else the first ``n``; an id outside the split: ValueError."""
    if ids is None:
        return list(range(min(n, size)))
    bad = [i for i in ids if not 0 <= int(i) < size]
    if bad:
        raise ValueError(f"example ids {', '.join(map(str, bad))} are outside the split's {size} "
                         f"items (0 to {size - 1})")
    return [int(i) for i in ids]
