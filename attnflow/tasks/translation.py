"""Machine translation: the seq2seq loss, greedy or beam decoding, BLEU and WER on detokenised text.

Validation and test decode every source sentence (beam 1: greedy), detokenise with the data's
tokenizer and score against the untokenised references: ``bleu`` (sacreBLEU corpus BLEU, 13a,
case-sensitive; Papineni et al. 2002, Post 2018), ``bleu_lc`` (lower-cased), ``wer`` (jiwer).
"""

from __future__ import annotations

import logging
from typing import Callable, Dict, List, Optional, Sequence

import torch

from attnflow.blocks.decoders.decoding import decode
from attnflow.config.registry import TASKS, NonNegativeFloat, PositiveInt, Probability
from attnflow.tasks.optim import OptimConfig
from attnflow.tasks.seq2seq import Seq2SeqTask, strip_after_eos
from attnflow.tasks.translation_metrics import corpus_bleu, word_error_rate
from attnflow.viz.figures import table_panel


@TASKS.register("translation")
class TranslationTask(Seq2SeqTask):
    """Seq2seq training with BLEU/WER of decoded translations; ``beam_size`` (test) and
    ``val_beam_size`` 1 is greedy; ``length_penalty`` is GNMT's α in ((5+|y|)/6)^α."""

    metrics = {**Seq2SeqTask.metrics, "bleu": "max", "bleu_lc": "max", "wer": "min"}
    monitor, monitor_mode = "val/bleu", "max"

    def __init__(self, model, pad_id: int, bos_id: int, eos_id: int, max_decode_len: int,
                 itos: Sequence[str] = (), src_itos: Sequence[str] = (),
                 detokenize: Optional[Callable] = None, references: Optional[Callable] = None, *,
                 optim: OptimConfig = OptimConfig(lr=1e-3), label_smoothing: Probability = 0.1,
                 beam_size: PositiveInt = 4, val_beam_size: PositiveInt = 1,
                 length_penalty: NonNegativeFloat = 0.6,
                 **kwargs):
        super().__init__(model, pad_id, bos_id, eos_id, max_decode_len, itos, optim=optim,
                         label_smoothing=label_smoothing, **kwargs)
        self.src_itos = list(src_itos) or self.itos
        self.detokenize = detokenize or (lambda ids: " ".join(self.target_token(i) for i in ids
                                                              if i not in (pad_id, bos_id, eos_id)))
        self.references = references
        self.beam_size, self.val_beam_size, self.length_penalty = beam_size, val_beam_size, length_penalty
        self._text: Dict[str, tuple] = {"val": ([], []), "test": ([], [])}
        self._lines: Dict[str, list] = {"val": [], "test": []}  # line numbers of _text's pairs
        self.bleu_signature = ""
        self.scores: Dict[str, dict] = {}

    # -- decoding -------------------------------------------------------------------------------
    @torch.no_grad()
    def translate_ids(self, src: torch.Tensor, src_lengths: torch.Tensor,
                      beam_size: PositiveInt = 1,
                      need_weights: bool = False):
        """Token ids (B, L) (and α) of the translations of a padded source batch."""
        return decode(self.model, src, src_lengths, self.bos_id, self.eos_id, self.max_decode_len,
                      beam_size, self.length_penalty, need_weights)

    def ids_to_text(self, tokens: torch.Tensor) -> List[str]:
        return [self.detokenize(row) for row in strip_after_eos(tokens, self.eos_id, self.pad_id).tolist()]

    def _decode(self, batch, split: str) -> torch.Tensor:
        beam = self.val_beam_size if split == "val" else self.beam_size
        return self.translate_ids(*self._source(batch), beam)[0]

    def _eval_step(self, batch, split: str) -> torch.Tensor:
        pred = super()._eval_step(batch, split)
        hyps, refs = self._text[split]
        hyps += self.ids_to_text(pred)
        self._lines[split] += batch["idx"].tolist() if "idx" in batch else [None] * len(pred)
        refs += self.references_of(batch, split)
        return pred

    def references_of(self, batch, split: str) -> list:
        """The batch's untokenised references where the data gives them, else its targets."""
        if self.references is not None and "idx" in batch:
            return self.references(split, batch["idx"].tolist())
        return self.ids_to_text(batch["tgt_out"])

    def _epoch_start(self, split: str) -> None:
        self._text[split] = ([], [])
        self._lines[split] = []

    def _corpus(self, split: str) -> tuple:
        """(hypotheses, references) of the whole split, every rank's shard gathered (corpus BLEU
        is no mean of per-rank BLEUs), a pair padded onto two ranks counted once."""
        hyps, refs = self._text[split]
        dist = torch.distributed
        if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
            return hyps, refs
        shards = [None] * dist.get_world_size()
        dist.all_gather_object(shards, (hyps, refs, self._lines[split]))
        out: dict = {}
        for rank, (h, r, lines) in enumerate(shards):
            for i, (hyp, ref, line) in enumerate(zip(h, r, lines)):
                out.setdefault(("line", line) if line is not None else ("rank", rank, i), (hyp, ref))
        pairs = [out[k] for k in sorted(out, key=str)]
        return [h for h, _ in pairs], [r for _, r in pairs]

    def _epoch_end(self, split: str) -> None:
        hyps, refs = self._corpus(split)
        if not hyps:
            return
        bleu, self.bleu_signature = corpus_bleu(hyps, refs)
        bleu_lc, _ = corpus_bleu(hyps, refs, lowercase=True)
        wer = word_error_rate(hyps, refs)
        self.scores[split] = {"bleu": bleu, "bleu_lc": bleu_lc, "wer": wer, "n": len(hyps),
                              "signature": self.bleu_signature}
        # every rank scored the same gathered corpus: syncing averages equal values
        self.log(f"{split}/bleu", bleu, prog_bar=True, sync_dist=True)
        self.log(f"{split}/bleu_lc", bleu_lc, sync_dist=True)
        self.log(f"{split}/wer", wer, sync_dist=True)
        if not self.trainer.sanity_checking and self.trainer.is_global_zero:  # (a run's train.log)
            logging.getLogger("attnflow.run").info(
                f"{split}: BLEU {bleu:.2f} (sacreBLEU {self.bleu_signature}), lower-cased "
                f"{bleu_lc:.2f}, WER {wer:.3f} on {len(hyps)} sentences")

    def on_validation_epoch_start(self) -> None:
        self._epoch_start("val")

    def on_validation_epoch_end(self) -> None:
        self._epoch_end("val")

    def on_test_epoch_start(self) -> None:
        self._epoch_start("test")

    def on_test_epoch_end(self) -> None:
        self._epoch_end("test")

    def source_token(self, i: int) -> str:
        """A source id as its token (the source vocabulary)."""
        return self.src_itos[i] if i < len(self.src_itos) else str(i)

    # -- dashboard ---------------------------------------------------------------------------------
    @torch.no_grad()
    def dashboard(self, batch: Dict[str, torch.Tensor]) -> List[dict]:
        """The seq2seq heat maps and ``val/translations``: source, reference, hypothesis."""
        panels = super().dashboard(batch)
        hyps, refs = self.hypotheses(batch), self.references_of(batch, "val")
        sources = [self.source_text(row[: int(n)])
                   for row, n in zip(batch["src"].tolist(), batch["src_lengths"].tolist())]
        panels.append(table_panel("val/translations", ["source", "reference", "hypothesis"],
                                  list(zip(sources, refs, hyps))))
        return panels
