"""What every encoder–decoder model shares: teacher forcing and generation around ``encode``.

A subclass sets ``self.decoder`` (a decoder of the protocol in
:mod:`attnflow.blocks.decoders.base`) and implements ``encode(src, src_lengths) -> (memory
(B, S, D), memory_mask (B, S) True at real tokens, final (B, D_init))``.
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch
from torch import nn

from attnflow.blocks.decoders.base import logits_at
from attnflow.blocks.decoders.decoding import decode
from attnflow.config.contracts import ModelContract


class EncoderDecoder(ModelContract, nn.Module):
    """Base of ``seq2seq`` and ``transformer``: forward (teacher forcing), greedy, beam search."""

    encoder: nn.Module
    decoder: nn.Module
    interface = "seq2seq"  # works on sequence pairs (attnflow.training.validate.check_composition)

    def encode(self, src: torch.Tensor, src_lengths: torch.Tensor):
        raise NotImplementedError

    def forward(self, src: torch.Tensor, src_lengths: torch.Tensor, tgt_in: torch.Tensor,
                need_weights: bool = False, positions: Optional[torch.Tensor] = None
                ) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
        """Teacher forcing: logits (B, T, V) (with ``positions`` (B, T) bool those rows only,
        (N, V)), and α (B, T, J, S) when asked for and the decoder attends."""
        memory, mask, final = self.encode(src, src_lengths)
        if positions is None:
            return self.decoder(tgt_in, memory, mask, final, need_weights=need_weights)
        return logits_at(self.decoder, positions, tgt_in, memory, mask, final,
                         need_weights=need_weights)

    @torch.no_grad()
    def greedy(self, src: torch.Tensor, src_lengths: torch.Tensor, bos_id: int, eos_id: int,
               max_len: int, need_weights: bool = False):
        """Argmax decoding: tokens (B, L) (⟨EOS⟩ included, then repeated), weights or None."""
        return decode(self, src, src_lengths, bos_id, eos_id, max_len, 1, 0.0, need_weights)

    @torch.no_grad()
    def beam_search(self, src: torch.Tensor, src_lengths: torch.Tensor, bos_id: int, eos_id: int,
                    max_len: int, beam_size: int = 4, length_penalty: float = 0.0,
                    need_weights: bool = False):
        """Batched beam search (:func:`attnflow.blocks.decoders.decoding.beam_search`): tokens (B, L), weights."""
        return decode(self, src, src_lengths, bos_id, eos_id, max_len, beam_size, length_penalty,
                      need_weights)
