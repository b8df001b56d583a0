"""Image captioning (Show, Attend and Tell): translation's training and decoding, images in.

Xu et al. 2015, eq. (14): the caption's negative log-likelihood plus the doubly stochastic
regulariser, λ = ``attention_reg``,

    L_d = −Σ_t log p(y_t | a, y_<t) + λ Σ_i (1 − Σ_t α_ti)²

summed over captions and divided by the target tokens, as the authors' code (arctic-captions)
and like the cross-entropy. BLEU-4 is scored against every reference caption of an image; on
``shapes`` also ``grounding`` (:mod:`attnflow.tasks.captioning_metrics`).
"""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

import torch
from torch import nn
from torchmetrics import SumMetric

from attnflow.blocks.attention.penalty import doubly_stochastic_penalty
from attnflow.blocks.decoders.decoding import decode
from attnflow.config.registry import TASKS, NonNegativeFloat, PositiveInt, Probability
from attnflow.io.console import warn_unread
from attnflow.tasks.base import updated_on_any_rank
from attnflow.tasks.captioning_metrics import grounding_sums, named_cells
from attnflow.tasks.optim import OptimConfig, attached_trainer
from attnflow.tasks.seq2seq import decoder_without_attention, strip_after_eos
from attnflow.tasks.translation import TranslationTask
from attnflow.viz.figures import caption_figure, decoder_alpha_label, image_panel, table_panel


@TASKS.register("captioning")
class CaptioningTask(TranslationTask):
    """Caption images with an attention decoder; BLEU-4 and, on ``shapes``, grounding."""

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
        """An image source leaves src_word_dropout unread, a decoder without attention λ."""
        super().check_config(cfg)
        task = cfg["task"]
        if task.get("name") != "captioning":
            return
        if task["src_word_dropout"] > 0:
            warn_unread(f"task.src_word_dropout={task['src_word_dropout']}",
                        "a captioning source is an image")
        decoder = decoder_without_attention(cfg.get("model") or {})
        if decoder and task["attention_reg"] > 0:
            warn_unread(f"task.attention_reg={task['attention_reg']}",
                        f"decoder '{decoder}' has no attention weights")

    # -- the seq2seq hooks: images in, attention terms out ----------------------------------------
    def _source(self, batch: Dict[str, torch.Tensor]):
        return batch["images"], None

    def _needs_weights(self, batch, split: str) -> bool:
        return (super()._needs_weights(batch, split) or self.attention_reg > 0
                or (split != "train" and "regions" in batch))

    def _attention_loss(self, weights, valid: torch.Tensor, split: str, n: int, batch=None):
        extra = super()._attention_loss(weights, valid, split, n, batch)
        if weights is None:
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
        if updated_on_any_rank(words, attached_trainer(self)):  # compute() syncs: all ranks or none
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
                need_weights: bool = False, keep_heads: bool = False
                ) -> Tuple[List[List[str]], Optional[List[torch.Tensor]]]:
        """The words of each image's caption and, with ``need_weights``, its attention (T_i, L),
        heads averaged (else None); with ``keep_heads`` (T_i, J, L), for pictures that say how
        many heads they average."""
        beam = self.beam_size if beam_size is None else beam_size
        tokens, weights = decode(self.model, images, None, self.bos_id, self.eos_id,
                                 self.max_decode_len, beam, self.length_penalty, need_weights)
        tokens = strip_after_eos(tokens, self.eos_id, self.pad_id)
        words, alphas = [], []
        special = (self.pad_id, self.bos_id, self.eos_id)
        for i, row in enumerate(tokens.tolist()):
            keep = [j for j, t in enumerate(row) if t not in special]
            words.append([self.target_token(row[j]) for j in keep])
            if weights is not None:
                a = weights[i, keep].float().cpu()
                alphas.append(a if keep_heads else a.mean(1))
        return words, (alphas if need_weights and weights is not None else None)

    # -- dashboard -----------------------------------------------------------------------------------
    def canvas(self, batch: Dict[str, torch.Tensor]) -> Tuple[torch.Tensor, torch.Tensor]:
        """(pixels (B, C, H, W) to draw each example's attention over, the regions' boxes (L, 4)
        on them): the batch's ``pixels`` (of region features), its images, else a grey canvas
        of the region grid."""
        images = batch["images"]
        pixels = batch.get("pixels")
        if pixels is None and images.dim() == 4:
            pixels = images
        if pixels is None:  # region features without their images: a grey canvas of the grid
            h, w = self.model.grid(images)
            pixels = torch.full((images.shape[0], 3, 16 * h, 16 * w), 0.5)
        return pixels, self.model.region_boxes(images, pixel_size=tuple(pixels.shape[-2:]))

    @torch.no_grad()
    def dashboard(self, batch: Dict[str, torch.Tensor]) -> List[dict]:
        """Per example each generated word's attention over the image (``val/attention/<i>``),
        and ``val/captions``: reference and hypothesis."""
        images = batch["images"].to(self.device)
        with self.eval_mode():
            words, alphas = self.caption(images, self.val_beam_size, need_weights=True, keep_heads=True)
        pixels, boxes = self.canvas(batch)
        refs = [r[0] if isinstance(r, (list, tuple)) else r
                for r in self.references_of(batch, "val")]
        panels = []
        for i, (w, a) in enumerate(zip(words, alphas or [])):
            text, what = " ".join(w), decoder_alpha_label(self.model, a.shape[1])
            fig = caption_figure(pixels[i].float().cpu(), w, a.mean(1), boxes,
                                 title=f"example {i}, {what}; predicted: {text}", reference=refs[i])
            panels.append(image_panel(f"val/attention/{i}", fig,
                                      caption=f"validation example {i}, each word's {what} over "
                                              f"the image; predicted: {text}; reference: {refs[i]}",
                                      file=f"val_example_{i}.png"))
        panels.append(table_panel("val/captions", ["reference", "hypothesis"],
                                  [(r, " ".join(w)) for r, w in zip(refs, words)]))
        return panels
