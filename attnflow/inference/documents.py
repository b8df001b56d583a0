"""Document classifiers applied: the run's task rebuilt with its vocabulary, and texts encoded
and capped as in training, each with its label, probabilities, attention weights and what the
caps cut, and the attention maps as arrays."""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Optional

import numpy as np

from attnflow.data.documents import Vocabulary, cap_document, encode_texts
from attnflow.inference.runs import open_run, rebuild
from attnflow.io.checkpoints import CheckpointError, Run, no_grad
from attnflow.io.labels import named_artifacts
from attnflow.io.text import text_array


def load(target: Path | str, device: str = "cpu", run: Optional[Run] = None):
    """(task, artifacts) of a document classifier rebuilt from a run directory or checkpoint."""
    run = run or open_run(target, device)
    art = named_artifacts(run)
    if not art.get("vocab"):
        raise CheckpointError(f"no vocabulary: {run.run_dir / 'vocab.json'} is missing and the "
                              f"checkpoint {run.checkpoint} carries none")
    vocab = art["vocab_obj"] = Vocabulary.from_json(art["vocab"])
    names = art["class_names"]
    return rebuild(run, {"vocab_size": len(vocab), "num_classes": len(names), "pad_id": 0},
                   task_context={"num_classes": len(names), "class_names": names, "itos": vocab.itos},
                   device=device), art


@no_grad
def predict(task, art: dict, texts: List[str], batch_size: int = 32,
            arrays: Optional[Dict[str, np.ndarray]] = None, first: int = 0) -> List[dict]:
    """Per text: label, probability, probabilities, sentences with word and sentence weights
    (:meth:`ClassificationTask.explain`), ``empty`` (no words), ``size`` and ``cut`` (words: all,
    cut by the caps), ``n_sentences`` and ``sentences_cut``. With ``arrays``:
    the ``--save-attention`` arrays of the texts, numbered from ``first``, added to it."""
    out, vocab, S, W = [], art["vocab_obj"], art["max_sentences"], art["max_words"]
    for i in range(0, len(texts), batch_size):
        chunk = texts[i:i + batch_size]
        batch, shown = encode_texts(chunk, vocab, S, W)
        for text, r in zip(chunk, task.explain(batch, shown)):
            doc = vocab.tokenize(text)
            kept, words = cap_document(doc, S, W), sum(len(s) for s in doc)
            r.update(text=text, empty=not doc, size=words, cut=words - sum(len(s) for s in kept),
                     n_sentences=len(doc), sentences_cut=len(doc) - len(kept))
            out.append(r)
        if arrays is not None:
            arrays.update(_attention_arrays(task, batch, shown, first + i))
    return out


def _attention_arrays(task, batch: dict, shown: list, first: int) -> Dict[str, np.ndarray]:
    """The ``--save-attention`` arrays of an encoded batch, numbered from ``first``."""
    out = task({k: v.to(task.device) for k, v in batch.items()})
    ww, sw, hops = (out.get(k) for k in ("word_weights", "sent_weights", "attention"))
    n_words = batch["sent_lengths"].sum(-1).tolist()
    arrays: Dict[str, np.ndarray] = {}
    for b, doc in enumerate(shown):
        i, S = first + b, len(doc)
        W = max((len(s) for s in doc), default=0)
        arrays[f"{i}/words"] = text_array([s + [""] * (W - len(s)) for s in doc]).reshape(S, W)
        if not S:
            continue
        if ww is not None:
            arrays[f"{i}/word_weights"] = ww[b, :S, :W].float().cpu().numpy()
        if sw is not None:
            arrays[f"{i}/sent_weights"] = sw[b, :S].float().cpu().numpy()
        if hops is not None:  # (B, r, n) over the document's words in reading order
            arrays[f"{i}/hops"] = hops[b, :, : n_words[b]].float().cpu().numpy()
    return arrays
