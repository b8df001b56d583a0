"""Text classification by a fine-tuned encoder (Devlin et al. 2019, §4.1): the pooled ⟨CLS⟩
state feeds a K-way classifier (``model.classify_logits``), all fine-tuned on −ln SoftMax(CWᵀ)_y.
Default recipe (§A.3): AdamW, lr 3e-5 after 100 warm-up steps, linear decay, weight decay 0.01.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from attnflow.config.registry import TASKS, Probability
from attnflow.tasks.base import Task
from attnflow.tasks.optim import OptimConfig
from attnflow.viz.explain import join_pieces
from attnflow.viz.figures import cls_attention_panels, cls_rows, table_panel


@TASKS.register("text_classification")
class TextClassificationTask(Task):
    """Fine-tunes an encoder with a sequence-classification head (Devlin et al. 2019, §4.1)."""

    interface = "text_classification"
    metrics = {"loss": "min", "acc": "max", "f1": "max"}
    monitor, monitor_mode = "val/acc", "max"

    def __init__(self, model: nn.Module, num_classes: int, class_names: Sequence[str] = (), *,
                 optim: OptimConfig = OptimConfig(optimizer="adamw", lr=3e-5, weight_decay=0.01,
                                                  scheduler="linear", warmup_steps=100,
                                                  decay_bias_and_norm=False),
                 label_smoothing: Probability = 0.0):
        super().__init__(model, optim=optim)
        self.num_classes, self.label_smoothing = num_classes, label_smoothing
        self.class_names = list(class_names) or [str(i) for i in range(num_classes)]
        self.add_class_metrics(num_classes)

    def forward(self, batch: Dict[str, torch.Tensor]) -> torch.Tensor:
        """Class logits (B, C)."""
        hidden = self.model(batch["input_ids"], batch["segment_ids"], batch["attention_mask"])
        return self.model.classify_logits(hidden)

    def step(self, batch: Dict[str, torch.Tensor], split: str) -> torch.Tensor:
        logits, y = self(batch), batch["labels"]
        loss = F.cross_entropy(logits.float(), y, label_smoothing=self.label_smoothing)
        self.log_class_metrics(split, loss, logits, y)
        return loss

    # -- dashboard ---------------------------------------------------------------------------------
    @torch.no_grad()
    def attention(self, batch: Dict[str, torch.Tensor]) -> Tuple[List[torch.Tensor], torch.Tensor]:
        """(every layer's attention (B, J, T, T), the class probabilities (B, C) on the CPU) of a
        batch, in eval mode."""
        batch = {k: v.to(self.device) for k, v in batch.items()}
        with self.eval_mode():
            hidden, maps = self.model(batch["input_ids"], batch["segment_ids"],
                                      batch["attention_mask"], need_weights=True)
            return maps, torch.softmax(self.model.classify_logits(hidden).float(), -1).cpu()

    def titles(self, labels: torch.Tensor, probs: torch.Tensor) -> List[str]:
        """Per text ``true <class> · predicted <class> (p=…)`` (a label < 0: none, no truth)."""
        return [(f"true {self.class_names[y]} · " if y >= 0 else "")
                + f"predicted {self.class_names[k]} (p={float(p[k]):.3f})"
                for y, p, k in zip(labels.tolist(), probs, probs.argmax(-1).tolist())]

    @torch.no_grad()
    def dashboard(self, batch: Dict[str, torch.Tensor],
                  tokens: Optional[List[List[str]]] = None) -> List[dict]:
        """Per text the ⟨CLS⟩ row of every layer's and head's attention (``val/attention/<i>``),
        and ``val/predictions``: text, label, prediction, its probability."""
        maps, probs = self.attention(batch)
        lengths = batch["attention_mask"].sum(-1).tolist()
        tokens = tokens or self.token_strings(batch["input_ids"].cpu(), lengths)
        true = [self.class_names[y] for y in batch["labels"].tolist()]
        pred = probs.argmax(-1).tolist()
        titles = self.titles(batch["labels"], probs)
        panels = cls_attention_panels(cls_rows(maps).cpu(), tokens, titles, "val_text")
        rows = [[join_pieces(toks, ("[PAD]", "[CLS]", "[SEP]")), t, self.class_names[k],
                 round(float(probs[i, k]), 4)] for i, (toks, t, k) in enumerate(zip(tokens, true, pred))]
        panels.append(table_panel("val/predictions", ["text", "label", "predicted", "probability"], rows))
        return panels
