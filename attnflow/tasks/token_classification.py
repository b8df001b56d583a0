"""Token classification by a fine-tuned encoder (Devlin et al. 2019, §4.3, Fig. 4d), e.g. named
entities: each word's tag is predicted from the final hidden state of its first WordPiece,

    logits_t = W_c Dropout(z_t) + b_c  (``model.token_logits``),
    L = −(1/|L|) Σ_{t ∈ L} ln SoftMax(logits_t)_{y_t},

L the labelled positions (first pieces; the rest, [CLS], [SEP] and padding carry -100 and are
skipped). Metrics: token accuracy over L, and entity-level precision, recall and F1 of the word
tag sequences (seqeval, strict IOB2: :mod:`attnflow.tasks.token_metrics`), which checkpoints
follow (``val/f1``). Default recipe (§A.3): AdamW, lr 5e-5 after 100 warm-up steps, linear decay,
weight decay 0.01.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence

import torch
import torch.nn.functional as F
from torch import nn
from torchmetrics.classification import MulticlassAccuracy

from attnflow.config.registry import TASKS, ConfigError, Probability
from attnflow.data.tagged import IGNORE
from attnflow.tasks.base import Task
from attnflow.tasks.optim import OptimConfig
from attnflow.tasks.token_metrics import SCORES, EntityScore, entity_counts, iob2_errors, word_tags
from attnflow.viz.figures import alpha_label, attention_figure, image_panel, table_panel


@TASKS.register("token_classification")
class TokenClassificationTask(Task):
    """Fine-tunes an encoder with a token-classification head (module docstring); the tags must
    be IOB2 (``O``, ``B-<type>``, ``I-<type>``) for the entity scores."""

    interface = "token_classification"
    metrics = {"loss": "min", "acc": "max", "precision": "max", "recall": "max", "f1": "max"}
    monitor, monitor_mode = "val/f1", "max"

    def __init__(self, model: nn.Module, num_classes: int, class_names: Sequence[str] = (), *,
                 optim: OptimConfig = OptimConfig(optimizer="adamw", lr=5e-5, weight_decay=0.01,
                                                  scheduler="linear", warmup_steps=100,
                                                  decay_bias_and_norm=False),
                 label_smoothing: Probability = 0.0):
        super().__init__(model, optim=optim)
        self.num_classes, self.label_smoothing = num_classes, label_smoothing
        self.class_names = list(class_names)
        if len(self.class_names) != num_classes:
            raise ConfigError(f"task 'token_classification': {num_classes} classes need as many tag "
                              f"names, got {self.class_names}")
        bad = iob2_errors(self.class_names)
        if bad:
            raise ConfigError(f"task 'token_classification': the tags {', '.join(map(repr, bad[:5]))} "
                              f"are not IOB2 (O, B-<type>, I-<type>), which the entity scores need")
        self._acc = nn.ModuleDict({f"{s}_": MulticlassAccuracy(num_classes, average="micro",
                                                               ignore_index=IGNORE)
                                   for s in ("train", "val", "test")})
        self._entities = nn.ModuleDict({f"{s}_{score}": EntityScore(score)
                                        for s in ("val", "test") for score in SCORES})

    def forward(self, batch: Dict[str, torch.Tensor]) -> torch.Tensor:
        """Tag logits (B, T, C) at every position."""
        hidden = self.model(batch["input_ids"], batch["segment_ids"], batch["attention_mask"])
        return self.model.token_logits(hidden)

    def step(self, batch: Dict[str, torch.Tensor], split: str) -> torch.Tensor:
        logits, y = self(batch), batch["labels"]
        loss = F.cross_entropy(logits.flatten(0, 1).float(), y.flatten(), ignore_index=IGNORE,
                               label_smoothing=self.label_smoothing)
        n, pred = int((y != IGNORE).sum()), logits.argmax(-1)
        acc = self._acc[f"{split}_"]
        acc(pred, y)  # forward: also the per-step value that training logs
        self.log(f"{split}/loss", loss, batch_size=n, prog_bar=split != "test",
                 sync_dist=split != "train")
        self.log(f"{split}/acc", acc, batch_size=n, prog_bar=True)
        if split != "train":
            self.log_entities(split, pred, y, n)
        return loss

    @torch.no_grad()
    def dashboard(self, batch: Dict[str, torch.Tensor],
                  tokens: Optional[List[List[str]]] = None) -> List[dict]:
        """Per sentence its last layer's attention, token × token, mean over heads
        (``val/attention/<i>``, titled with the predicted tags), and ``val/predictions``: each
        sentence's words (first pieces) with their true and predicted tags. ``tokens``: the
        rows' token strings (default: the data module's tokenizer's, else the ids)."""
        maps, sentences = self.tagged(batch, tokens)
        last = maps[-1].float().cpu()
        heads = last.shape[1] if last.dim() == 4 else 1
        last = last.mean(1) if last.dim() == 4 else last
        label = alpha_label(heads, (len(maps), len(maps)))
        panels, rows = [], []
        for i, s in enumerate(sentences):
            n = len(s["tokens"])
            panels.append(image_panel(f"val/attention/{i}", attention_figure(
                last[i, :n, :n], s["tokens"], s["tokens"], s["title"][:90], label=label),
                caption=s["title"], file=f"val_sentence_{i}.png"))
            rows.append([" ".join(s["words"]), " ".join(s["tags"]), " ".join(s["predicted"])])
        return panels + [table_panel("val/predictions", ["words", "tags", "predicted"], rows)]

    @torch.no_grad()
    def tagged(self, batch: Dict[str, torch.Tensor], tokens: Optional[List[List[str]]] = None):
        """(every layer's attention (B, J, T, T), per sentence its real ``tokens`` (``tokens``,
        default :meth:`token_strings`), ``words`` (first pieces), true ``tags``, ``predicted``
        tags and a ``title``: each word with its predicted tag), in eval mode."""
        batch = {k: v.to(self.device) for k, v in batch.items()}
        with self.eval_mode():
            hidden, maps = self.model(batch["input_ids"], batch["segment_ids"],
                                      batch["attention_mask"], need_weights=True)
            pred = self.model.token_logits(hidden).argmax(-1).cpu()
        labels, lengths = batch["labels"].cpu(), batch["attention_mask"].sum(-1).tolist()
        true, guess = word_tags(pred, labels, self.class_names, IGNORE)
        tokens = tokens or self.token_strings(batch["input_ids"].cpu(), lengths)
        sentences = []
        for i, n in enumerate(lengths):
            words = [w.lstrip("▁") or w for w, y in zip(tokens[i], labels[i].tolist()) if y != IGNORE]
            sentences.append({"tokens": tokens[i][:n], "words": words, "tags": true[i], "predicted": guess[i],
                              "title": " ".join(f"{w}/{t}" for w, t in zip(words, guess[i]))})
        return maps, sentences

    def log_entities(self, split: str, pred: torch.Tensor, y: torch.Tensor, n: int) -> None:
        """Add the batch's entity counts to the split's scores (computed at the epoch's end)."""
        counts = torch.tensor(entity_counts(*word_tags(pred.cpu(), y.cpu(), self.class_names, IGNORE)))
        for score in SCORES:
            metric = self._entities[f"{split}_{score}"]
            metric.update(counts)
            self.log(f"{split}/{score}", metric, batch_size=n, prog_bar=score == "f1")
