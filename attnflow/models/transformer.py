"""The Transformer encoder–decoder for translation (Vaswani et al. 2017).

§3: encoder, decoder, positional encoding; §3.4: embeddings scaled by √d (initialised N(0, 1/d))
and shared; relative positions: Shaw et al. 2018.

    Z = Encoder(E_src x · √d),   p(y_t | y_<t, x) = Decoder(E_tgt y_<t · √d, Z)

``tie_embeddings``: 'all' (one matrix for source, target and output: a shared vocabulary),
'decoder' (target embedding ≡ output layer) or 'none'.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import nn

from attnflow.blocks.attention.functional import padding_mask
from attnflow.blocks.positional.learned import check_table_covers
from attnflow.models.encoder_decoder import EncoderDecoder
from attnflow.config.registry import (DATA, DECODERS, ENCODERS, MODELS, BlockSpec, ConfigError, PositiveInt,
                               Probability)


@MODELS.register("transformer")
class Transformer(EncoderDecoder):
    """Encoder–decoder Transformer with optional tied embeddings.

    Shape: src (B, S), src_lengths (B,), tgt_in (B, T) -> logits (B, T, tgt_vocab), weights
    (B, T, J, S) of the last decoder layer's encoder–decoder attention, or None.
    """

    @classmethod
    def check_config(cls, cfg: dict) -> None:
        """``tie_embeddings=all`` has one vocabulary for both sides, and a bounded positional
        table covers the longest sequence the data gives."""
        if (cfg.get("model") or {}).get("name") == "transformer":
            model, data = cfg["model"], DATA.get(cfg["data"]["name"])
            if (model.get("positional") or {}).get("max_len"):
                check_table_covers(model["positional"], data.longest_positions(cfg["data"]), "positional")
            if model["tie_embeddings"] == "all" and data.one_vocabulary(cfg["data"]) is False:
                raise ConfigError(
                    "model 'transformer': tie_embeddings=all shares one embedding between source "
                    "and target, but data.shared_vocab=false gives each side its own vocabulary; "
                    "set data.shared_vocab=true or model.tie_embeddings=decoder")

    def __init__(self, src_vocab: int, tgt_vocab: int, pad_id: int = 0, *,
                 d_model: PositiveInt = 256,
                 ffn_dim: PositiveInt = 1024, encoder_layers: PositiveInt = 3,
                 decoder_layers: PositiveInt = 3,
                 dropout: Probability = 0.1, activation_dropout: Probability = 0.0,
                 norm: Literal["post", "pre"] = "post",
                 positional: BlockSpec["positional"] = {"name": "sinusoidal"},
                 attention: BlockSpec["attention"] = {"name": "multihead"},
                 tie_embeddings: Literal["all", "decoder", "none"] = "all",
                 scale_embeddings: bool = True):
        super().__init__()
        if tie_embeddings == "all" and src_vocab != tgt_vocab:
            raise ConfigError(
                f"model 'transformer': tie_embeddings='all' needs one shared vocabulary, but "
                f"src_vocab={src_vocab} and tgt_vocab={tgt_vocab}; use "
                f"model.tie_embeddings=decoder")
        self.pad_id, self.d_model = pad_id, d_model
        self.embed_scale = math.sqrt(d_model) if scale_embeddings else 1.0
        self.src_embedding = nn.Embedding(src_vocab, d_model, padding_idx=pad_id)
        if scale_embeddings:
            nn.init.normal_(self.src_embedding.weight, 0.0, d_model ** -0.5)
            with torch.no_grad():
                self.src_embedding.weight[pad_id].zero_()
        shared = dict(d_model=d_model, layers=encoder_layers, ffn_dim=ffn_dim, dropout=dropout,
                      activation_dropout=activation_dropout, norm=norm, positional=positional,
                      attention=attention)
        self.encoder = ENCODERS.build({"name": "transformer_encoder", **shared}, d_model)
        shared["layers"] = decoder_layers
        self.decoder = DECODERS.build(
            {"name": "transformer_decoder", **shared, "scale_embeddings": scale_embeddings,
             "tie_output": tie_embeddings != "none"}, tgt_vocab, d_model, d_model)
        if tie_embeddings == "all":
            self.decoder.share_embedding(self.src_embedding)

    def encode(self, src: torch.Tensor, src_lengths: torch.Tensor):
        """-> memory (B, S, d) zero at padding, memory_mask (B, S) True at real tokens, final (B, d)."""
        memory, final = self.encoder(self.src_embedding(src) * self.embed_scale, src_lengths)
        return memory, padding_mask(src_lengths, src.shape[1]), final
