"""Text classification by a fine-tuned encoder: cross-entropy over one label per text.

Devlin et al. 2019, §4.1: the final hidden state of ⟨CLS⟩, through the pooler, feeds a new
K-way classifier W (``model.classify_logits``), and all parameters are fine-tuned on
−ln SoftMax(C Wᵀ)_y. Their fine-tuning recipe (§A.3): AdamW, learning rate 5e-5, 3e-5 or 2e-5,
batch 16 or 32, 2–4 epochs, linear warm-up and decay; here the default is 3e-5 after 100 warm-up
steps, decaying linearly to 0 ('linear' of :mod:`attnflow.tasks.optim`), and weight decay 0.01
except on biases and norms.

Metrics, logged as ``{train,val,test}/<name>``: ``loss``, ``acc`` (micro accuracy) and ``f1``
(macro F1, validation and test; torchmetrics); validation and test values are the means over
every rank's texts (``sync_dist``). The checkpoint metric is ``val/acc`` (max).

Dashboard (:meth:`TextClassificationTask.dashboard`, each validation with W&B or TensorBoard):
per example the ⟨CLS⟩ query's attention over its tokens in every layer and head as a heat map
(``val/attention/<i>``), and a table of text, true label, prediction and its probability
(``val/predictions``).

The batch contract (the ``text_classification`` data module): ``input_ids``, ``segment_ids``
(B, T) long, ``attention_mask`` (B, T) bool, ``labels`` (B,) long. The model contract:
``model(input_ids, segment_ids, attention_mask) -> hidden (B, T, d)`` and
``model.classify_logits(hidden) -> (B, C)`` (``model=bert model.head=sequence``).
"""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence

import torch
import torch.nn.functional as F
from torch import nn
from torchmetrics.classification import MulticlassAccuracy, MulticlassF1Score

from attnflow.config.registry import TASKS, Probability
from attnflow.tasks.base import Task
from attnflow.tasks.optim import OptimConfig


@TASKS.register("text_classification")
class TextClassificationTask(Task):
    """Fine-tunes an encoder with a sequence-classification head (Devlin et al. 2019, §4.1).

    Args:
        model: a model with ``forward`` and ``classify_logits`` (context).
        num_classes: number of classes (context).
        class_names: class index → name (context).
        optim: optimiser and schedule (default AdamW, peak lr 3e-5 after 100 linear warm-up
            steps, then linear decay to 0 ('linear'), weight decay 0.01 except on biases and
            norms).
        label_smoothing: (default 0.0).
    """

    interface = "text_classification"
    metrics = {"loss": "min", "acc": "max", "f1": "max"}
    monitor, monitor_mode = "val/acc", "max"

    def __init__(self, model: nn.Module, num_classes: int, class_names: Sequence[str] = (), *,
                 optim: OptimConfig = OptimConfig(optimizer="adamw", lr=3e-5, weight_decay=0.01,
                                                  scheduler="linear", warmup_steps=100,
                                                  decay_bias_and_norm=False),
                 label_smoothing: Probability = 0.0):
        super().__init__(model, optim=optim)
        head = getattr(model, "head", "sequence")
        if not callable(getattr(model, "classify_logits", None)) or head != "sequence":
            raise ValueError(f"task 'text_classification' needs a model with a sequence-classification "
                             f"head (model=bert model.head=sequence); got {type(model).__name__}"
                             + (f" with head {head!r}" if isinstance(head, str) else ""))
        if num_classes < 2:
            raise ValueError(f"task 'text_classification': num_classes must be >= 2, got {num_classes}")
        self.num_classes, self.label_smoothing = num_classes, label_smoothing
        self.class_names = list(class_names) or [str(i) for i in range(num_classes)]
        self._acc = nn.ModuleDict({f"{s}_": MulticlassAccuracy(num_classes, average="micro")
                                   for s in ("train", "val", "test")})
        self._f1 = nn.ModuleDict({f"{s}_": MulticlassF1Score(num_classes, average="macro")
                                  for s in ("val", "test")})

    def forward(self, batch: Dict[str, torch.Tensor]) -> torch.Tensor:
        """Class logits (B, C)."""
        hidden = self.model(batch["input_ids"], batch["segment_ids"], batch["attention_mask"])
        return self.model.classify_logits(hidden)

    def step(self, batch: Dict[str, torch.Tensor], split: str) -> torch.Tensor:
        logits, y = self(batch), batch["labels"]
        loss = F.cross_entropy(logits.float(), y, label_smoothing=self.label_smoothing)
        n, pred = len(y), logits.argmax(-1)
        acc = self._acc[f"{split}_"]
        acc(pred, y)  # forward, not update: it also sets the per-step value that training logs
        sync = split != "train"  # val/test: the mean over every rank's texts
        self.log(f"{split}/loss", loss, batch_size=n, prog_bar=split != "test", sync_dist=sync)
        self.log(f"{split}/acc", acc, batch_size=n, prog_bar=True)
        if split != "train":
            self._f1[f"{split}_"].update(pred, y)
            self.log(f"{split}/f1", self._f1[f"{split}_"], batch_size=n)
        return loss

    # -- dashboard ---------------------------------------------------------------------------------
    def _tokens(self, ids: torch.Tensor, lengths: torch.Tensor) -> List[List[str]]:
        """Token strings of a batch's rows, from the data module's tokenizer (the constructor
        takes only what a classifier needs, and the tokenizer lives with the data); ids as text
        where there is none."""
        dm = getattr(self._trainer, "datamodule", None) if self._trainer is not None else None
        tok = getattr(dm, "tokenizer", None)
        show = tok.id_to_token if tok is not None else str
        return [[show(i) or str(i) for i in row[:n]] for row, n in zip(ids.tolist(), lengths.tolist())]

    @torch.no_grad()
    def dashboard(self, batch: Dict[str, torch.Tensor],
                  tokens: Optional[List[List[str]]] = None) -> List[dict]:
        """Panels for :class:`attnflow.training.callbacks.AttentionMaps`: per text the ⟨CLS⟩ row of every
        layer's and head's self-attention over its tokens (``val/attention/<i>``, one size for
        all; ``attention/val_text_<i>.png`` at the end), and ``val/predictions``: text, true
        label, predicted label, its probability. ``tokens``: the texts' token strings (default:
        the data module's tokenizer)."""
        from attnflow.viz.explain import join_pieces
        from attnflow.viz.figures import cls_attention_panels, cls_rows, table_panel

        batch = {k: v.to(self.device) for k, v in batch.items()}
        with self.eval_mode():
            hidden, maps = self.model(batch["input_ids"], batch["segment_ids"],
                                      batch["attention_mask"], need_weights=True)
            probs = torch.softmax(self.model.classify_logits(hidden).float(), -1).cpu()
        lengths = batch["attention_mask"].sum(-1).cpu()
        tokens = tokens or self._tokens(batch["input_ids"].cpu(), lengths)
        true = [self.class_names[y] for y in batch["labels"].tolist()]
        pred = probs.argmax(-1).tolist()
        titles = [f"true {t} · predicted {self.class_names[k]} (p={float(probs[i, k]):.3f})"
                  for i, (t, k) in enumerate(zip(true, pred))]
        panels = cls_attention_panels(cls_rows(maps).cpu(), tokens, titles, "val_text")
        rows = [[join_pieces(toks, ("[PAD]", "[CLS]", "[SEP]")), t, self.class_names[k],
                 round(float(probs[i, k]), 4)] for i, (toks, t, k) in enumerate(zip(tokens, true, pred))]
        panels.append(table_panel("val/predictions", ["text", "label", "predicted", "probability"], rows))
        return panels
