"""Document classification task: cross-entropy, accuracy and macro-F1, optional attention penalty.

Loss: −ln SoftMax_y(logits) of the true class (the negative log-likelihood of Yang et al. 2016, §2.3),
plus ``penalty_weight`` · mean ‖AAᵀ − I‖²_F (Lin et al. 2017) when the model returns attention
hops A (``attention`` (B, r, n)) and the weight is positive.

Metrics, logged as ``{train,val,test}/<name>``: ``loss``, ``acc`` (micro accuracy), ``f1`` (macro
F1, validation and test), ``penalty`` when weighted. Every validation epoch a few documents are
rendered with their word and sentence weights to ``<run dir>/renderings/val_epoch<N>.html``.

The model contract: ``model(tokens (B,S,W), sent_lengths (B,S)) -> {"logits": (B,C), optional
"attention", "attention_valid", "word_weights" (B,S,W), "sent_weights" (B,S)}``.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, Dict, List, Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import nn
from torchmetrics.classification import MulticlassAccuracy, MulticlassF1Score

from attnflow.blocks.attention.penalty import diversity_penalty
from attnflow.config.registry import (MODELS, TASKS, AttnflowWarning, NonNegativeFloat, NonNegativeInt,
                               Probability)
from attnflow.tasks.base import Task
from attnflow.tasks.optim import OptimConfig


@TASKS.register("classification")
class ClassificationTask(Task):
    """Trains a document classifier.

    Args:
        model: the model (context).
        num_classes: number of classes (context).
        class_names: class index → name (context).
        itos: word id → word, for renderings (context).
        optim: optimiser and schedule (default Adam, lr 0.002, cosine decay over the run).
        label_smoothing: (default 0.0).
        penalty_weight: coefficient of ‖AAᵀ − I‖²_F for models returning attention hops
            (default 0.0: off).
        renderings: documents rendered to HTML every validation epoch (default 4; 0 = off).
    """

    interface = "documents"
    metrics = {"loss": "min", "acc": "max", "f1": "max", "penalty": "min"}
    conditional_metrics = {"penalty": "penalty_weight"}
    monitor, monitor_mode = "val/acc", "max"
    def __init__(self, model: nn.Module, num_classes: int, class_names: Sequence[str] = (),
                 itos: Sequence[str] = (), *,
                 optim: OptimConfig = OptimConfig(lr=0.002, scheduler="cosine"),
                 label_smoothing: Probability = 0.0, penalty_weight: NonNegativeFloat = 0.0,
                 renderings: NonNegativeInt = 4):
        super().__init__(model, optim=optim)
        self.num_classes = num_classes
        self.class_names = list(class_names) or [str(i) for i in range(num_classes)]
        self.itos = list(itos)
        self.label_smoothing, self.penalty_weight = label_smoothing, penalty_weight
        self.renderings = renderings
        self._acc = nn.ModuleDict({f"{s}_": MulticlassAccuracy(num_classes, average="micro")
                                   for s in ("train", "val", "test")})
        self._f1 = nn.ModuleDict({f"{s}_": MulticlassF1Score(num_classes, average="macro")
                                  for s in ("val", "test")})

    @classmethod
    def check_config(cls, cfg: Mapping[str, Any]) -> None:
        """``penalty_weight`` is read only by a model that returns attention hops (its class's
        ``attention_hops``: self_attentive); HAN's pooling weights are not hops."""
        if cfg["task"].get("name") != "classification":
            return
        weight = cfg["task"]["penalty_weight"]
        model = cfg["model"]["name"]
        if weight > 0 and not getattr(MODELS.get(model), "attention_hops", False):
            warnings.warn(f"task.penalty_weight={weight} is unread: model '{model}' returns no "
                          f"attention hops", AttnflowWarning)

    def forward(self, batch: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
        return self.model(batch["tokens"], batch["sent_lengths"])

    def step(self, batch: Dict[str, torch.Tensor], split: str) -> torch.Tensor:
        out = self(batch)
        logits, y = out["logits"], batch["labels"]
        loss = F.cross_entropy(logits, y, label_smoothing=self.label_smoothing)
        n = len(y)
        pred = logits.argmax(-1)
        acc = self._acc[f"{split}_"]
        acc(pred, y)  # forward, not update: it also sets the per-step value that training logs
        # val/test: the mean over every rank's documents (sync_dist), not rank 0's
        self.log(f"{split}/loss", loss, batch_size=n, prog_bar=split != "test", sync_dist=split != "train")
        self.log(f"{split}/acc", acc, batch_size=n, prog_bar=True)
        if split != "train":
            self._f1[f"{split}_"].update(pred, y)
            self.log(f"{split}/f1", self._f1[f"{split}_"], batch_size=n)
        if self.penalty_weight > 0 and out.get("attention") is not None:
            penalty = diversity_penalty(out["attention"], out.get("attention_valid"))
            self.log(f"{split}/penalty", penalty, batch_size=n, sync_dist=split != "train")
            loss = loss + self.penalty_weight * penalty
        return loss

    # -- explanations ----------------------------------------------------------------------------
    @torch.no_grad()
    def explain(self, batch: Dict[str, torch.Tensor], words: List[List[List[str]]] | None = None
                ) -> List[dict]:
        """Per document: predicted class, its probability, all probabilities, and the sentences
        with word and sentence weights (lists, padding removed). ``words`` gives the tokens to
        show; by default the vocabulary's words for the ids."""
        batch = {k: v.to(self.device) for k, v in batch.items()}
        with self.eval_mode():
            out = self(batch)
        probs = torch.softmax(out["logits"].float(), -1).cpu()
        ww, sw = out.get("word_weights"), out.get("sent_weights")
        lengths = batch["sent_lengths"].cpu()
        tokens = batch["tokens"].cpu()
        result = []
        for b in range(len(probs)):
            n = int((lengths[b] > 0).sum())
            sents = []
            for i in range(n):  # rendering only, not a training path
                L = int(lengths[b, i])
                sents.append(words[b][i][:L] if words is not None else
                             [self.itos[t] if t < len(self.itos) else str(t) for t in tokens[b, i, :L].tolist()])
            k = int(probs[b].argmax())
            result.append({
                "label": self.class_names[k], "index": k, "probability": float(probs[b, k]),
                "probabilities": {c: float(p) for c, p in zip(self.class_names, probs[b].tolist())},
                "sentences": sents,
                "word_weights": [ww[b, i, : len(sents[i])].float().cpu().tolist() for i in range(n)]
                if ww is not None else [[0.0] * len(s) for s in sents],
                "sent_weights": sw[b, :n].float().cpu().tolist() if sw is not None else None,
            })
        return result

    def on_validation_epoch_end(self) -> None:
        trainer = self.trainer
        if (self.renderings <= 0 or trainer.sanity_checking or not trainer.is_global_zero
                or trainer.datamodule is None or not hasattr(trainer.datamodule, "example_batch")):
            return
        from attnflow.viz.explain import write_html

        docs = self._titled_examples(trainer.datamodule.example_batch(self.renderings))
        write_html(Path(trainer.default_root_dir) / "renderings" / f"val_epoch{trainer.current_epoch}.html",
                   docs, f"validation documents, epoch {trainer.current_epoch}")

    # -- dashboard ---------------------------------------------------------------------------------
    def _titled_examples(self, batch: Dict[str, torch.Tensor]) -> List[dict]:
        docs = self.explain(batch)
        for d, y in zip(docs, batch["labels"].tolist()):
            d["title"] = (f"true {self.class_names[y]} · predicted {d['label']} "
                          f"(p={d['probability']:.3f})")
        return docs

    def dashboard(self, batch: Dict[str, torch.Tensor]) -> List[dict]:
        """Panels for :class:`attnflow.training.callbacks.AttentionMaps`: per document its word and
        sentence weights as an image (``val/attention/<i>``, one size for all;
        ``attention/val_document_<i>.png`` at the end) and all of them as the HTML rendering
        (``val/attention_html``, a W&B HTML panel). Models without sentence weights
        (self_attentive: word weights, mean over hops) get word shading only."""
        from attnflow.viz.explain import render_html
        from attnflow.viz.figures import document_figure, html_panel, image_panel

        docs = self._titled_examples(batch)
        panels = [image_panel(f"val/attention/{i}", document_figure(
                      d["sentences"], d["word_weights"], d["sent_weights"], d["title"]),
                      caption=d["title"], file=f"val_document_{i}.png")
                  for i, d in enumerate(docs)]
        if docs:
            panels.append(html_panel("val/attention_html", render_html(docs, "validation documents")))
        return panels
