"""Sequence-to-sequence task: teacher-forced cross-entropy, greedy decoding, sequence accuracy.

Loss: −Σ_t ln p(w̃_t | t, S, W) over real target tokens (Sutskever et al. 2014), label-smoothed,
plus ``penalty_weight`` · ‖AAᵀ − I‖²_F (Lin et al. 2017) over the decoder's attention.

Word dropout (training): each source / decoder-input token other than ⟨pad⟩, ⟨BOS⟩, ⟨EOS⟩ becomes
⟨pad⟩ with probability ``src_word_dropout`` / ``tgt_word_dropout`` (Gal & Ghahramani 2016;
Sennrich & Zhang 2019); targets are never dropped.

R-Drop (training, α = ``rdrop_alpha`` > 0; Liang et al. 2021, Eq. 3, halved): the batch runs
twice in one pass (stacked), giving P₁, P₂, and
L = ½ [CE(P₁) + CE(P₂) + α · ½ (KL(P₁‖P₂) + KL(P₂‖P₁))], logged as ``train/loss`` (CE) and
``train/rdrop_kl``.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import nn
from torchmetrics import MeanMetric

from attnflow.blocks.attention.penalty import diversity_penalty
from attnflow.blocks.decoders.base import logits_at
from attnflow.config.registry import DECODERS, TASKS, NonNegativeFloat, Probability
from attnflow.io.console import warn_unread
from attnflow.tasks.base import Task
from attnflow.tasks.optim import OptimConfig
from attnflow.viz.figures import attention_figure, decoder_alpha_label, image_panel


def strip_after_eos(tokens: torch.Tensor, eos_id: int, pad_id: int) -> torch.Tensor:
    """Replace everything after the first ⟨EOS⟩ of each row by ⟨pad⟩."""
    after = (tokens == eos_id).long().cumsum(-1) - (tokens == eos_id).long() > 0
    return tokens.masked_fill(after, pad_id)


def word_dropout(tokens: torch.Tensor, p: float, fill_id: int, keep: Sequence[int]) -> torch.Tensor:
    """Each token not in ``keep`` replaced by ``fill_id`` with probability ``p`` (a new tensor)."""
    if p <= 0:
        return tokens
    drop = torch.rand(tokens.shape, device=tokens.device) < p
    drop &= ~torch.isin(tokens, torch.tensor(list(keep), device=tokens.device))
    return tokens.masked_fill(drop, fill_id)


def rdrop_terms(logits: torch.Tensor, target: torch.Tensor, label_smoothing: float = 0.0):
    """R-Drop's terms for ``logits`` (2N, V) of a batch stacked on itself and ``target`` (2N,):
    the smoothed cross-entropy over all 2N, ½ (KL(P₁‖P₂) + KL(P₂‖P₁)) =
    ½ Σ_v (p₁ − p₂)(ln p₁ − ln p₂) averaged over N, and the argmax hits; one log-softmax."""
    log_p = F.log_softmax(logits.float(), -1)
    nll = -log_p.gather(-1, target.unsqueeze(-1)).squeeze(-1)
    ce = ((1 - label_smoothing) * nll - label_smoothing * log_p.mean(-1)).mean()
    log_p1, log_p2 = log_p.chunk(2)
    kl = ((log_p1.exp() - log_p2.exp()) * (log_p1 - log_p2)).sum(-1).mean() / 2
    return ce, kl, log_p.detach().max(-1).indices == target


def decoder_without_attention(model_cfg: Mapping[str, Any]) -> str:
    """The model's decoder name where its class has ``attends = False`` (decoder 'rnn'), else ''."""
    decoder = model_cfg.get("decoder")
    name = decoder.get("name") if isinstance(decoder, Mapping) else None
    if name in DECODERS and not DECODERS.get(name).attends:
        return name
    return ""


def any_dropout_field(block_cfg: Mapping[str, Any]) -> bool:
    """Whether a block config (or a child's) sets a ``*dropout*`` field above 0."""
    return any(any_dropout_field(v) if isinstance(v, Mapping) else
               "dropout" in k and isinstance(v, (int, float)) and v > 0
               for k, v in block_cfg.items())


def exact_match(pred: torch.Tensor, ref: torch.Tensor, eos_id: int, pad_id: int) -> torch.Tensor:
    """(B,) bool: the prediction equals the reference up to and including ⟨EOS⟩."""
    pred = strip_after_eos(pred, eos_id, pad_id)
    L = max(pred.shape[1], ref.shape[1])
    pred = F.pad(pred, (0, L - pred.shape[1]), value=pad_id)
    ref = F.pad(ref, (0, L - ref.shape[1]), value=pad_id)
    return (pred == ref).all(-1)


@TASKS.register("seq2seq")
class Seq2SeqTask(Task):
    """Trains a :class:`~attnflow.models.seq2seq.Seq2Seq` model; metrics ``loss``, ``token_acc``
    (teacher-forced) and ``seq_acc`` (greedy output equals the reference through ⟨EOS⟩)."""

    interface = "seq2seq"
    metrics = {"loss": "min", "token_acc": "max", "seq_acc": "max", "penalty": "min"}
    monitor, monitor_mode = "val/seq_acc", "max"
    conditional_metrics = {"penalty": "penalty_weight"}

    def __init__(self, model: nn.Module, pad_id: int, bos_id: int, eos_id: int,
                 max_decode_len: int, itos: Sequence[str] = (), *,
                 optim: OptimConfig = OptimConfig(lr=0.003, scheduler="cosine"),
                 label_smoothing: Probability = 0.0, penalty_weight: NonNegativeFloat = 0.0,
                 src_word_dropout: Probability = 0.0, tgt_word_dropout: Probability = 0.0,
                 rdrop_alpha: NonNegativeFloat = 0.0):
        super().__init__(model, optim=optim)
        self.pad_id, self.bos_id, self.eos_id = pad_id, bos_id, eos_id
        self.max_decode_len, self.itos = max_decode_len, list(itos)
        self.label_smoothing, self.penalty_weight = label_smoothing, penalty_weight
        self.src_word_dropout, self.tgt_word_dropout = src_word_dropout, tgt_word_dropout
        self.rdrop_alpha = rdrop_alpha
        # ModuleDict keys must not shadow nn.Module attributes ('train'), hence the suffix
        self._seq_acc = nn.ModuleDict({f"{s}_": MeanMetric() for s in ("val", "test")})
        self._token_acc = nn.ModuleDict({f"{s}_": MeanMetric() for s in ("train", "val", "test")})

    @classmethod
    def check_config(cls, cfg: Mapping[str, Any]) -> None:
        """R-Drop with nothing that drops out, and the penalty without attention, are unread."""
        task, model = cfg["task"], cfg.get("model") or {}
        if (task["rdrop_alpha"] > 0 and not (task["src_word_dropout"] or task["tgt_word_dropout"])
                and not any_dropout_field(model)):
            warn_unread(f"task.rdrop_alpha={task['rdrop_alpha']}",
                        "nothing drops out, so the two passes are equal")
        decoder = decoder_without_attention(model)
        if task.get("penalty_weight", 0) > 0 and decoder:
            warn_unread(f"task.penalty_weight={task['penalty_weight']}",
                        f"decoder '{decoder}' has no attention weights")

    # -- one batch -----------------------------------------------------------------------------
    def _source(self, batch: Dict[str, torch.Tensor]):
        """What the model encodes: (source ids, their lengths); captioning: (images, None)."""
        return batch["src"], batch["src_lengths"]

    def _needs_weights(self, batch: Dict[str, torch.Tensor], split: str) -> bool:
        """Whether the loss pass must return the attention weights (for a penalty or metric)."""
        return self.penalty_weight > 0

    def _attention_loss(self, weights, valid: torch.Tensor, split: str, n: int, batch=None):
        """penalty_weight · ‖AAᵀ − I‖²_F (Lin et al. 2017); 0 without weights (decoder 'rnn')."""
        if self.penalty_weight <= 0 or weights is None:
            return 0.0
        penalty = diversity_penalty(weights, valid)
        self.log(f"{split}/penalty", penalty, batch_size=n, sync_dist=split != "train")
        return self.penalty_weight * penalty

    def _word_dropout(self, batch: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
        """The training batch with source and decoder-input tokens dropped (a new dict)."""
        keep = (self.pad_id, self.bos_id, self.eos_id)
        batch = dict(batch)
        if self.src_word_dropout > 0:
            batch["src"] = word_dropout(batch["src"], self.src_word_dropout, self.pad_id, keep)
        batch["tgt_in"] = word_dropout(batch["tgt_in"], self.tgt_word_dropout, self.pad_id, keep)
        return batch

    def _loss(self, batch: Dict[str, torch.Tensor], split: str) -> torch.Tensor:
        twice = split == "train" and self.rdrop_alpha > 0
        if twice:  # R-Drop: the batch stacked on itself, two dropout draws in one pass
            batch = {k: torch.cat([v, v]) if torch.is_tensor(v) else v for k, v in batch.items()}
        inputs = self._word_dropout(batch) if split == "train" else batch
        target = batch["tgt_out"]
        valid = target != self.pad_id
        # the logits of the real target tokens only, (n, V): the padding costs nothing
        logits, weights = logits_at(self.model, valid, *self._source(inputs), inputs["tgt_in"],
                                    need_weights=self._needs_weights(batch, split))
        target = target[valid]
        n = target.numel()  # from the shape: no device sync
        if twice:
            loss, kl, hits = rdrop_terms(logits, target, self.label_smoothing)
        else:
            loss = F.cross_entropy(logits, target, label_smoothing=self.label_smoothing)
            # max's indices: argmax's rule, 3× faster on a bf16 CPU matrix
            hits = logits.max(-1).indices == target
        self._token_acc[f"{split}_"].update(hits.float())
        # val/test: the token-weighted mean over every rank's batches (sync_dist), not rank 0's
        self.log(f"{split}/loss", loss, batch_size=n, prog_bar=split != "test", sync_dist=split != "train")
        self.log(f"{split}/token_acc", self._token_acc[f"{split}_"], batch_size=n)
        if twice:
            self.log("train/rdrop_kl", kl, batch_size=n // 2)
            loss = loss + self.rdrop_alpha / 2 * kl
        return loss + self._attention_loss(weights, valid, split, n, batch)

    def step(self, batch, split: str):
        if split == "train":
            return self._loss(batch, split)
        self._eval_step(batch, split)

    def _decode(self, batch, split: str) -> torch.Tensor:
        return self.model.greedy(*self._source(batch), self.bos_id, self.eos_id,
                                 self.max_decode_len)[0]

    @torch.no_grad()
    def hypotheses(self, batch: Dict[str, torch.Tensor]) -> List[str]:
        """The batch decoded as validation decodes it, as text (dashboards, comparisons)."""
        batch = {k: v.to(self.device) if torch.is_tensor(v) else v for k, v in batch.items()}
        with self.eval_mode():
            return self.ids_to_text(self._decode(batch, "val"))

    def ids_to_text(self, tokens: torch.Tensor) -> List[str]:
        """Each row's tokens through its first ⟨EOS⟩, the specials left out, joined by spaces."""
        special = (self.pad_id, self.bos_id, self.eos_id)
        return [" ".join(self.target_token(i) for i in row if i not in special)
                for row in strip_after_eos(tokens, self.eos_id, self.pad_id).tolist()]

    def _eval_step(self, batch, split: str) -> torch.Tensor:
        """The loss, and ``seq_acc`` of the decoded batch (returned)."""
        self._loss(batch, split)
        pred = self._decode(batch, split)
        match = exact_match(pred, batch["tgt_out"], self.eos_id, self.pad_id)
        self._seq_acc[f"{split}_"].update(match.float())
        self.log(f"{split}/seq_acc", self._seq_acc[f"{split}_"], batch_size=len(match),
                 prog_bar=self.monitor.endswith("seq_acc"))
        return pred

    # -- attention maps --------------------------------------------------------------------------
    @torch.no_grad()
    def attention_examples(self, batch: Dict[str, torch.Tensor]) -> List[dict]:
        """Per example of a greedy-decoded batch α (output × source, mean over heads) with token
        labels and a ``label`` saying which layer and how many heads; empty for decoders without
        attention."""
        batch = {k: v.to(self.device) for k, v in batch.items()}
        with self.eval_mode():
            pred, weights = self.model.greedy(batch["src"], batch["src_lengths"], self.bos_id,
                                              self.eos_id, self.max_decode_len, need_weights=True)
        if weights is None:
            return []
        out, label = [], decoder_alpha_label(self.model, weights.shape[2])
        for i in range(pred.shape[0]):
            S = int(batch["src_lengths"][i])
            ids = strip_after_eos(pred[i : i + 1], self.eos_id, self.pad_id)[0]
            T = int((ids != self.pad_id).sum())
            out.append({
                "weights": weights[i, :T, :, :S].mean(1).float().cpu(),
                "source": [self.source_token(t) for t in batch["src"][i, :S].tolist()],
                "output": [self.target_token(t) for t in pred[i, :T].tolist()],
                "label": label,
            })
        return out

    def dashboard(self, batch: Dict[str, torch.Tensor]) -> List[dict]:
        """One α heat map per example (``val/attention/<i>``); title, colour bar and caption say
        which layer and heads it shows."""
        return [image_panel(f"val/attention/{i}", attention_figure(
                    e["weights"], e["source"], e["output"], f"validation example {i}: {e['label']}",
                    label=e["label"]),
                    caption=f"validation example {i}: {e['label']} of each output word over the source",
                    file=f"val_example_{i}.png")
                for i, e in enumerate(self.attention_examples(batch))]

    def source_token(self, i: int) -> str:
        """A source id as its token (one vocabulary: the target's)."""
        return self.target_token(i)

    def target_token(self, i: int) -> str:
        """A target id as its token (an id past the vocabulary as its number)."""
        return self.itos[i] if i < len(self.itos) else str(i)

    def source_text(self, ids: Sequence[int]) -> str:
        """Source ids as text: subwords joined (``▁`` starts a word, ``##`` continues one)."""
        toks = [self.source_token(i) for i in ids if i not in (self.pad_id, self.bos_id, self.eos_id)]
        if any("▁" in t for t in toks):
            text = "".join(t[2:] if t.startswith("##") else t for t in toks).replace("▁", " ")
        else:  # word-level vocabularies (synthetic data)
            text = " ".join(toks)
        return " ".join(text.split())
