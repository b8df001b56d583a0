"""Document classification: cross-entropy, accuracy and macro-F1, optional attention penalty.

Loss: −ln SoftMax_y(logits) (Yang et al. 2016, §2.3), plus ``penalty_weight`` · mean ‖AAᵀ − I‖²_F
(Lin et al. 2017) over the attention hops A (B, r, n) of a model that returns them. Every
validation epoch a few documents are rendered to ``<run dir>/renderings/val_epoch<N>.html``; the
validation of the best checkpoint after training to ``best.html``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from attnflow.blocks.attention.penalty import diversity_penalty
from attnflow.config.contracts import DataContract
from attnflow.config.registry import MODELS, TASKS, NonNegativeFloat, NonNegativeInt, Probability
from attnflow.io.console import warn_unread
from attnflow.tasks.base import Task
from attnflow.tasks.optim import OptimConfig
from attnflow.viz.explain import render_html, write_html
from attnflow.viz.figures import document_figure, html_panel, image_panel


@TASKS.register("classification")
class ClassificationTask(Task):
    """Trains a document classifier; ``renderings``: documents rendered per validation (0: off)."""

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
        self.add_class_metrics(num_classes)

    @classmethod
    def check_config(cls, cfg: Mapping[str, Any]) -> None:
        """``penalty_weight`` is read only by a model with ``attention_hops`` (self_attentive)."""
        if cfg["task"].get("name") != "classification":
            return
        weight = cfg["task"]["penalty_weight"]
        model = cfg["model"]["name"]
        if weight > 0 and not MODELS.get(model).attention_hops:
            warn_unread(f"task.penalty_weight={weight}",
                        f"model '{model}' returns no attention hops")

    def forward(self, batch: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
        return self.model(batch["tokens"], batch["sent_lengths"])

    def step(self, batch: Dict[str, torch.Tensor], split: str) -> torch.Tensor:
        out = self(batch)
        logits, y = out["logits"], batch["labels"]
        loss = F.cross_entropy(logits, y, label_smoothing=self.label_smoothing)
        self.log_class_metrics(split, loss, logits, y)
        if self.penalty_weight > 0 and out.get("attention") is not None:
            penalty = diversity_penalty(out["attention"], out.get("attention_valid"))
            self.log(f"{split}/penalty", penalty, batch_size=len(y), sync_dist=split != "train")
            loss = loss + self.penalty_weight * penalty
        return loss

    # -- explanations ----------------------------------------------------------------------------
    @torch.no_grad()
    def explain(self, batch: Dict[str, torch.Tensor], words: List[List[List[str]]] | None = None,
                out: Optional[Dict[str, torch.Tensor]] = None) -> List[dict]:
        """Per document: predicted class and probabilities, its sentences (``words``, default the
        vocabulary's) with word and sentence weights, padding removed; ``out``: the model's
        output on ``batch`` where the caller has it (:meth:`outputs`)."""
        out = self.outputs(batch) if out is None else out
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

    @torch.no_grad()
    def outputs(self, batch: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
        """The model's output on ``batch`` in eval mode (logits, and its weights)."""
        with self.eval_mode():
            return self({k: v.to(self.device) for k, v in batch.items()})

    def on_validation_epoch_end(self) -> None:
        trainer = self.trainer
        if (self.renderings <= 0 or trainer.sanity_checking or not trainer.is_global_zero
                or not isinstance(trainer.datamodule, DataContract)):
            return
        docs = self.titled_examples(trainer.datamodule.example_batch(self.renderings))
        fitting, epoch = trainer.state.fn == "fit", trainer.current_epoch
        name = f"val_epoch{epoch}" if fitting else (self.logged_as.strip("/") or "evaluated")
        write_html(Path(trainer.default_root_dir) / "renderings" / f"{name}.html", docs,
                   f"validation documents, epoch {epoch}" if fitting else f"validation documents ({name})")

    # -- dashboard ---------------------------------------------------------------------------------
    def titled_examples(self, batch: Dict[str, torch.Tensor],
                        out: Optional[Dict[str, torch.Tensor]] = None) -> List[dict]:
        """:meth:`explain` with each document's ``title``: true and predicted class."""
        docs = self.explain(batch, out=out)
        for d, y in zip(docs, batch["labels"].tolist()):  # (y < 0: a text without a label)
            truth = f"true {self.class_names[y]} · " if y >= 0 else ""
            d["title"] = f"{truth}predicted {d['label']} (p={d['probability']:.3f})"
        return docs

    def _shading(self, doc: dict, hop: Optional[int] = None) -> str:
        """What a document picture's colours are (:func:`attnflow.viz.figures.document_figure`):
        word α, the mean of a model's r hops where it returns hops (or hop ``hop``), times
        √ sentence α where there is one, whose bars are red."""
        hops = self.model.hops
        words = (f"word α (hop {hop + 1} of {hops})" if hop is not None else
                 f"word α (mean over {hops} hops)" if hops > 1 else "word α")
        if doc["sent_weights"] is None:
            return f"blue: {words}"
        return f"blue: {words} × √(sentence α); red: sentence α"

    def dashboard(self, batch: Dict[str, torch.Tensor]) -> List[dict]:
        """Per document its weights as an image (``val/attention/<i>``), and all as HTML
        (``val/attention_html``)."""
        docs = self.titled_examples(batch)
        panels = [image_panel(f"val/attention/{i}", *self.document_picture(d), file=f"val_document_{i}.png")
                  for i, d in enumerate(docs)]
        if docs:
            panels.append(html_panel("val/attention_html", render_html(docs, "validation documents")))
        return panels

    def document_picture(self, doc: dict, hop: Optional[int] = None):
        """(:func:`~attnflow.viz.figures.document_figure` of a :meth:`titled_examples` document,
        its title: the classes and what the colours are); ``hop``: its word weights are that
        hop's, not the mean of the hops."""
        title = f"{doc['title']} · {self._shading(doc, hop)}"
        return document_figure(doc["sentences"], doc["word_weights"], doc["sent_weights"], title), title
