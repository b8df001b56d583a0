"""BERT pretraining task: masked language modelling (MLM) plus next-sentence prediction (NSP).

Source: Devlin et al. 2019, "BERT: Pre-training of Deep Bidirectional Transformers for Language
Understanding", §3.1 and §A.1–A.2: the pretraining loss is the sum of the mean MLM likelihood
and the mean NSP likelihood,

    L = −1/|M| Σ_{(b,t)∈M} ln p(x_{b,t} | x̃_b)  −  1/B Σ_b ln p(y_b | x̃_b),

where M is the set of positions selected for MLM (``mlm_labels != -100``: the 15% the data
module picked, whatever it replaced them with) and y_b the NSP label (0: S′ is the true next span,
1: a random span, as HF transformers' ``next_sentence_label``). Positions outside M never count,
neither in the loss nor in the accuracy.

Logged as ``{train,val,test}/<name>``: ``loss`` (L), ``mlm_loss``, ``nsp_loss``, ``mlm_acc``
(argmax over the vocabulary at the selected positions), ``nsp_acc`` (over the pairs). Each is
logged with the number of items it averages over as its batch size, so that an epoch's value is
the mean over all selected positions (or pairs), not a mean of batch means; an epoch's ``loss``
is the mean of the batches' L weighted by their pairs (so not exactly the epoch's ``mlm_loss`` +
``nsp_loss``, whose MLM part is weighted by selected positions).

The batch contract (from the ``bert_pretraining`` data module): ``input_ids``, ``segment_ids``
(B, T) long, ``attention_mask`` (B, T) bool, ``mlm_labels`` (B, T) long (−100: not selected),
``nsp_labels`` (B,) long. The model contract: ``model(input_ids, segment_ids, attention_mask) ->
hidden (B, T, d)``, ``model.mlm_logits(hidden) -> (…, V)``, ``model.nsp_logits(hidden) -> (B, 2)``.

The MLM output layer is applied only at the selected positions (about 15% of the tokens): its
V-sized output is the largest tensor of a step, and the other 85% would be thrown away.

Dashboard (:meth:`BertPretrainingTask.dashboard`, each validation with W&B or TensorBoard): per
example pair the ⟨CLS⟩ query's attention over its tokens in every layer and head as a heat map
(``val/attention/<i>``), and ``val/masked_lm``: the masked input, the original and the predicted
token at each selected position, and the true and predicted next-sentence label.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from attnflow.config.registry import TASKS, NonNegativeFloat
from attnflow.tasks.base import Task
from attnflow.tasks.optim import OptimConfig

IGNORE = -100  # mlm_labels at positions not selected for MLM (PyTorch's and HF's ignore index)
NSP_NAMES = ("next", "random")  # nsp_labels 0: S′ is the true next span; 1: a random one


@TASKS.register("bert_pretraining")
class BertPretrainingTask(Task):
    """Pretrains a BERT encoder with the MLM and NSP losses (Devlin et al. 2019).

    Args:
        model: a model with ``forward``, ``mlm_logits`` and ``nsp_logits`` (context).
        mask_id: id of the [MASK] token (context, from the data module).
        itos: token id → string, for dashboards (context; may be empty).
        optim: optimiser and schedule (default Devlin et al. 2019 §A.2's: AdamW, weight decay
            0.01 except on biases and norms, peak lr 1e-4 after linear warm-up — 1,000 steps
            here, their 10,000 were 1% of a million — then linear decay to 0 at the last step).
        nsp_weight: weight of the NSP loss in the sum (default 1.0: Devlin et al.'s sum; 0.0
            trains on MLM alone, as Liu et al. 2019's RoBERTa; NSP is still measured).
    """

    interface = "pretraining"
    metrics = {"loss": "min", "mlm_loss": "min", "nsp_loss": "min", "mlm_acc": "max", "nsp_acc": "max"}
    monitor, monitor_mode = "val/loss", "min"

    def __init__(self, model: nn.Module, mask_id: Optional[int] = None, itos: Sequence[str] = (), *,
                 optim: OptimConfig = OptimConfig(optimizer="adamw", lr=1e-4, weight_decay=0.01,
                                                  scheduler="linear", warmup_steps=1000,
                                                  decay_bias_and_norm=False),
                 nsp_weight: NonNegativeFloat = 1.0):
        super().__init__(model, optim=optim)
        for method in ("mlm_logits", "nsp_logits"):
            if not callable(getattr(model, method, None)):
                raise ValueError(f"task 'bert_pretraining' needs a model with a '{method}' method "
                                 f"(model=bert); got {type(model).__name__}")
        self.mask_id, self.itos, self.nsp_weight = mask_id, list(itos), float(nsp_weight)

    def forward(self, batch: Dict[str, torch.Tensor]) -> torch.Tensor:
        return self.model(batch["input_ids"], batch["segment_ids"], batch["attention_mask"])

    def losses(self, batch: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
        """The MLM and NSP losses and correct counts of one batch (what ``step`` logs)."""
        hidden = self(batch)
        labels = batch["mlm_labels"]
        selected = labels != IGNORE
        n_mlm = int(selected.sum())
        # (1, N, d): the model's head sees a batch of one "sequence" of the selected positions
        mlm_logits = self.model.mlm_logits(hidden[selected].unsqueeze(0)).squeeze(0)
        target = labels[selected]
        if n_mlm:
            mlm_loss = F.cross_entropy(mlm_logits.float(), target)
        else:  # no position selected (the data module selects at least one per sequence)
            mlm_loss = mlm_logits.sum() * 0.0
        nsp_logits = self.model.nsp_logits(hidden)
        nsp_loss = F.cross_entropy(nsp_logits.float(), batch["nsp_labels"])
        return {"mlm_loss": mlm_loss, "nsp_loss": nsp_loss, "n_mlm": n_mlm,
                "mlm_correct": (mlm_logits.argmax(-1) == target).sum(),
                "nsp_correct": (nsp_logits.argmax(-1) == batch["nsp_labels"]).sum()}

    def step(self, batch: Dict[str, torch.Tensor], split: str) -> torch.Tensor:
        out = self.losses(batch)
        loss = out["mlm_loss"] + self.nsp_weight * out["nsp_loss"]
        b, n_mlm = len(batch["nsp_labels"]), max(out["n_mlm"], 1)
        sync = split != "train"  # val/test: the mean over every rank's examples
        self.log(f"{split}/loss", loss, batch_size=b, prog_bar=split != "test", sync_dist=sync)
        self.log(f"{split}/mlm_loss", out["mlm_loss"], batch_size=n_mlm, sync_dist=sync)
        self.log(f"{split}/nsp_loss", out["nsp_loss"], batch_size=b, sync_dist=sync)
        self.log(f"{split}/mlm_acc", out["mlm_correct"].float() / n_mlm, batch_size=n_mlm,
                 prog_bar=True, sync_dist=sync)
        self.log(f"{split}/nsp_acc", out["nsp_correct"].float() / b, batch_size=b, sync_dist=sync)
        return loss

    # -- dashboard ---------------------------------------------------------------------------------
    def _tok(self, i: int) -> str:
        return self.itos[i] if i < len(self.itos) else str(i)

    @torch.no_grad()
    def dashboard(self, batch: Dict[str, torch.Tensor]) -> List[dict]:
        """Panels for :class:`attnflow.training.callbacks.AttentionMaps`: per pair the ⟨CLS⟩ row of every
        layer's and head's self-attention over its tokens (``val/attention/<i>``, one size for
        all; ``attention/val_pair_<i>.png`` at the end), and ``val/masked_lm``: the input as the
        model reads it, ``original→predicted`` at each selected position, the next-sentence
        label (``next``: S′ follows S, ``random``) and its prediction."""
        from attnflow.viz.explain import join_pieces
        from attnflow.viz.figures import cls_attention_panels, cls_rows, table_panel

        batch = {k: v.to(self.device) for k, v in batch.items()}
        with self.eval_mode():
            hidden, maps = self.model(batch["input_ids"], batch["segment_ids"],
                                      batch["attention_mask"], need_weights=True)
            selected = batch["mlm_labels"] != IGNORE
            guess = torch.full_like(batch["mlm_labels"], IGNORE)
            guess[selected] = self.model.mlm_logits(hidden[selected]).argmax(-1)
            nsp = torch.softmax(self.model.nsp_logits(hidden).float(), -1).cpu()
        lengths = batch["attention_mask"].sum(-1).tolist()
        ids, labels = batch["input_ids"].cpu().tolist(), batch["mlm_labels"].cpu().tolist()
        tokens = [[self._tok(i) for i in row[:n]] for row, n in zip(ids, lengths)]
        nsp_true, nsp_pred = batch["nsp_labels"].tolist(), nsp.argmax(-1).tolist()
        titles = [f"pair {i}: S′ {NSP_NAMES[t]} · predicted {NSP_NAMES[p]} (p={float(nsp[i, p]):.3f})"
                  for i, (t, p) in enumerate(zip(nsp_true, nsp_pred))]
        panels = cls_attention_panels(cls_rows(maps).cpu(), tokens, titles, "val_pair")
        rows = []
        for i, toks in enumerate(tokens):  # table text: a few examples
            picks = [f"{self._tok(y)}→{self._tok(g)}" for y, g in zip(labels[i], guess[i].tolist())
                     if y != IGNORE]
            rows.append([join_pieces(toks, ("[PAD]",)), " ".join(picks), NSP_NAMES[nsp_true[i]],
                         NSP_NAMES[nsp_pred[i]]])
        panels.append(table_panel("val/masked_lm", ["input", "selected: original→predicted",
                                                    "next sentence", "predicted"], rows))
        return panels
