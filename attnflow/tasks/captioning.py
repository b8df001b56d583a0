"""Image captioning task (Show, Attend and Tell): translation's training and decoding, images in.

Source: Xu et al. 2015, "Show, Attend and Tell", eq. (14): the loss is the caption's negative
log-likelihood plus the doubly stochastic regulariser

    L_d = −Σ_t log p(y_t | a, y_<t) + λ Σ_i (1 − Σ_t α_ti)²

(:func:`attnflow.blocks.attention.penalty.doubly_stochastic_penalty`; ``attention_reg`` is λ, 0
switches it off). As in the authors' code (arctic-captions: the word losses summed per caption, R
summed over regions, λ = 1), L_d is summed over the batch's captions and, like the cross-entropy
of every attnflow task, divided by the number of target tokens: loss = mean word cross-entropy +
λ · Σ_captions R / #tokens. (The popular PyTorch tutorial averages R over regions instead, which
weakens λ by a factor L.) Everything else is :class:`~attnflow.tasks.translation.TranslationTask`'s, with
the images as the source: teacher forcing, label smoothing, greedy decoding for validation and
beam search for test (:mod:`attnflow.blocks.decoders.decoding`), and BLEU-4 by sacreBLEU against every reference
caption of an image (multi-reference, as COCO and Flickr8k are scored).

Metrics, as ``{val,test}/<name>``: ``bleu`` (BLEU-4), ``bleu_lc``, ``wer`` (against the first
reference), ``loss``, ``token_acc``, ``seq_acc``, ``attention_reg`` (R, also for train) and, when
the data knows which pixels each word names (``shapes``), ``grounding`` and ``grounding_mass``
(:mod:`attnflow.tasks.captioning_metrics`: attention mass on the named object against the uniform
share; 1 = no better than uniform).
"""

from __future__ import annotations

import warnings
from typing import Dict, List, Optional, Sequence, Tuple

import torch
from torch import nn
from torchmetrics import SumMetric

from attnflow.blocks.attention.penalty import doubly_stochastic_penalty
from attnflow.blocks.decoders.decoding import decode
from attnflow.tasks.base import updated_on_any_rank
from attnflow.config.registry import TASKS, AttnflowWarning, ConfigError, NonNegativeFloat, PositiveInt, Probability
from attnflow.tasks.captioning_metrics import grounding_sums, named_cells
from attnflow.tasks.optim import OptimConfig
from attnflow.tasks.seq2seq import decoder_without_attention, strip_after_eos
from attnflow.tasks.translation import TranslationTask


@TASKS.register("captioning")
class CaptioningTask(TranslationTask):
    """Caption images with an attention decoder; BLEU-4 and, on ``shapes``, grounding.

    Args:
        model, pad_id, bos_id, eos_id, max_decode_len, itos: as the translation task (context).
        references: (split, item indices) -> every reference caption of each image (context).
        optim: optimiser and schedule (default Adam, lr 1e-3, constant).
        label_smoothing: ε of the smoothed cross-entropy (default 0.0, as Xu et al.).
        attention_reg: λ of the doubly stochastic regulariser λ Σ_i (1 − Σ_t α_ti)², per target
            token as the cross-entropy (default 1.0, the authors' code's; 0 switches it off).
        beam_size: beam of test decoding and of ``caption``; 1 = greedy (default 3).
        val_beam_size: beam of validation decoding (default 1: greedy, cheaper).
        length_penalty: α of the GNMT length penalty ((5+|y|)/6)^α (default 0.0: none).
    """

    interface = "captioning"
    metrics = {**TranslationTask.metrics, "attention_reg": "min", "grounding": "max",
               "grounding_mass": "max"}

    def __init__(self, model, pad_id: int, bos_id: int, eos_id: int, max_decode_len: int,
                 itos: Sequence[str] = (), references=None, *,
                 optim: OptimConfig = OptimConfig(lr=1e-3), label_smoothing: Probability = 0.0,
                 attention_reg: NonNegativeFloat = 1.0, beam_size: PositiveInt = 3,
                 length_penalty: NonNegativeFloat = 0.0,
                 **kwargs):
        super().__init__(model, pad_id, bos_id, eos_id, max_decode_len, itos,
                         references=references, optim=optim, label_smoothing=label_smoothing,
                         beam_size=beam_size, length_penalty=length_penalty, **kwargs)
        self.attention_reg = attention_reg
        # Σ mass and Σ uniform share over the split's object-naming words (synced under DDP)
        self._ground = nn.ModuleDict({f"{s}_{k}": SumMetric() for s in ("val", "test")
                                      for k in ("mass", "share", "words")})

    @classmethod
    def check_config(cls, cfg: dict) -> None:
        """λ > 0 needs a decoder that attends (the regulariser is a sum of its weights); an image
        source leaves src_word_dropout unread. And the seq2seq task's checks."""
        super().check_config(cfg)
        if cfg["task"].get("name") != "captioning":
            return
        task = cfg["task"]  # with the defaults
        if task["src_word_dropout"] > 0:
            warnings.warn(f"task.src_word_dropout={task['src_word_dropout']} is unread: a captioning "
                          f"source is an image", AttnflowWarning)
        decoder = decoder_without_attention(cfg.get("model") or {})
        lam = task["attention_reg"]
        if decoder and lam > 0:
            raise ConfigError(f"task.attention_reg={lam} (the doubly stochastic regulariser) needs "
                              f"attention weights, and decoder '{decoder}' has none; set "
                              f"task.attention_reg=0 or model.decoder.name=rnn_attention")

    # -- the seq2seq hooks: images in, attention terms out ----------------------------------------
    def _source(self, batch: Dict[str, torch.Tensor]):
        return batch["images"], None

    def _needs_weights(self, batch, split: str) -> bool:
        return (super()._needs_weights(batch, split) or self.attention_reg > 0
                or (split != "train" and "regions" in batch))

    def _attention_loss(self, weights, valid: torch.Tensor, split: str, n: int, batch=None):
        extra = super()._attention_loss(weights, valid, split, n, batch)
        if weights is None:
            if self.attention_reg > 0:
                raise ValueError("task.attention_reg > 0 needs attention weights, and this model's "
                                 "decoder has none (decoder 'rnn'); set task.attention_reg=0")
            return extra
        reg = doubly_stochastic_penalty(weights, valid)  # mean over captions of R
        self.log(f"{split}/attention_reg", reg, batch_size=len(valid), sync_dist=split != "train")
        if split != "train" and batch is not None and "regions" in batch:
            self._update_grounding(weights, batch, split)
        if self.attention_reg <= 0:
            return extra
        return extra + self.attention_reg * reg * len(valid) / max(n, 1)  # Σ_captions R / #tokens

    def _update_grounding(self, weights: torch.Tensor, batch, split: str) -> None:
        cells = named_cells(batch["regions"], self.model.region_boxes(batch["images"]))
        T = min(cells.shape[1], weights.shape[1])
        mass, share, words = grounding_sums(weights[:, :T].mean(2).float(), cells[:, :T])
        for key, value in (("mass", mass), ("share", share), ("words", words)):
            self._ground[f"{split}_{key}"].update(value)

    def _epoch_end(self, split: str) -> None:
        super()._epoch_end(split)
        words = self._ground[f"{split}_words"]
        if updated_on_any_rank(words, self._trainer):  # compute() syncs: all ranks or none
            n = float(words.compute())
            mass = float(self._ground[f"{split}_mass"].compute())
            share = float(self._ground[f"{split}_share"].compute())
            if n > 0:
                self.log(f"{split}/grounding", mass / share if share > 0 else 0.0)
                self.log(f"{split}/grounding_mass", mass / n)
        for key in ("mass", "share", "words"):
            self._ground[f"{split}_{key}"].reset()

    # -- captions for users ------------------------------------------------------------------------
    @torch.no_grad()
    def caption(self, images: torch.Tensor, beam_size: Optional[int] = None,
                need_weights: bool = False) -> Tuple[List[List[str]], Optional[List[torch.Tensor]]]:
        """Captions of a batch of images (or region features): the words of each (no ⟨eos⟩), and
        with ``need_weights`` each caption's attention (T_i, L) — one row per word, heads
        averaged — else None. ``beam_size`` None: the task's ``beam_size``."""
        beam = self.beam_size if beam_size is None else beam_size
        tokens, weights = decode(self.model, images, None, self.bos_id, self.eos_id,
                                 self.max_decode_len, beam, self.length_penalty, need_weights)
        tokens = strip_after_eos(tokens, self.eos_id, self.pad_id)
        words, alphas = [], []
        special = (self.pad_id, self.bos_id, self.eos_id)
        for i, row in enumerate(tokens.tolist()):
            keep = [j for j, t in enumerate(row) if t not in special]  # (an untrained model
            words.append([self._tok(row[j]) for j in keep])  # may emit ⟨pad⟩ or ⟨bos⟩: dropped)
            if weights is not None:
                alphas.append(weights[i, keep].mean(1).float().cpu())
        return words, (alphas if need_weights and weights is not None else None)

    # -- dashboard -----------------------------------------------------------------------------------
    @torch.no_grad()
    def dashboard(self, batch: Dict[str, torch.Tensor]) -> List[dict]:
        """Per example the image with each generated word's attention drawn over it
        (``val/attention/<i>``; ``attention/val_example_<i>.png`` at the end), and
        ``val/captions``: a table of reference and hypothesis (validation decoding)."""
        from attnflow.viz.figures import caption_figure, image_panel, table_panel

        images = batch["images"].to(self.device)
        with self.eval_mode():
            words, alphas = self.caption(images, self.val_beam_size, need_weights=True)
        pixels = batch.get("pixels")
        if pixels is None and images.dim() == 4:
            pixels = batch["images"]
        if pixels is None:  # region features without their images: a grey canvas of the grid
            h, w = self.model.grid(images)
            pixels = torch.full((len(words), 3, 16 * h, 16 * w), 0.5)
        boxes = self.model.region_boxes(images, pixel_size=tuple(pixels.shape[-2:]))
        if self.references is not None and "idx" in batch:
            refs = [r[0] if isinstance(r, (list, tuple)) else r
                    for r in self.references("val", batch["idx"].tolist())]
        else:
            refs = self.ids_to_text(batch["tgt_out"])
        panels = []
        for i, (w, a) in enumerate(zip(words, alphas or [])):
            text = " ".join(w)
            fig = caption_figure(pixels[i].float().cpu(), w, a, boxes, title=f"example {i}: {text}")
            panels.append(image_panel(f"val/attention/{i}", fig,
                                      caption=f"validation example {i}, each word's α over the "
                                              f"image; predicted: {text}",
                                      file=f"val_example_{i}.png"))
        panels.append(table_panel("val/captions", ["reference", "hypothesis"],
                                  [(r, " ".join(w)) for r, w in zip(refs, words)]))
        return panels
