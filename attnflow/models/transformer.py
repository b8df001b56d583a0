"""The Transformer encoder–decoder for translation (Vaswani et al. 2017).

Source: Vaswani et al. 2017, "Attention is all you need" (§3: encoder, decoder, positional
encoding; §3.4: shared embeddings scaled by √d); relative positions: Shaw et al. 2018.

    Z = Encoder(E_src x · √d)                     (the encoder adds p_i; blocks/encoders/transformer)
    p(y_t | y_<t, x) = Decoder(E_tgt y_<t · √d, Z) (the decoder adds p_t; blocks/decoders/transformer)

Tied embeddings (``tie_embeddings``): 'all' — one matrix for source embedding, target embedding and
the output layer (the paper, with a shared BPE vocabulary of 37k); this needs a shared
vocabulary, so src_vocab must equal tgt_vocab; 'decoder' — target embedding ≡ output layer;
'none'. Embeddings are scaled by √d and initialised N(0, 1/d). Attention: ``attention`` (the
shared group: multihead with J heads, relative_multihead, single, …, with its scorer, normaliser
and aggregator) in every sublayer. Positions: ``positional`` (sinusoidal, learned, none, or
relative, which adds no absolute encoding and gives every self-attention relative-position
terms). Label smoothing and the warm-up (Noam) schedule belong to the task.

Model interface (as ``seq2seq``): ``forward`` (teacher forcing), ``encode``, ``decoder`` (the
decoder protocol of :mod:`attnflow.blocks.decoders.base`) and ``greedy``.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import nn

from attnflow.blocks.attention.functional import padding_mask
from attnflow.blocks.attention.multihead import check_model_heads
from attnflow.blocks.positional.learned import check_table_covers
from attnflow.models.encoder_decoder import EncoderDecoder
from attnflow.config.registry import (DATA, DECODERS, ENCODERS, MODELS, BlockSpec, ConfigError, PositiveInt,
                               Probability)


@MODELS.register("transformer")
class Transformer(EncoderDecoder):
    """Encoder–decoder Transformer with optional tied embeddings.

    Args:
        src_vocab, tgt_vocab: vocabulary sizes (context, from the data module).
        pad_id: the padding token id (context).
        d_model: d (default 256; the paper's base: 512).
        ffn_dim: the FFN's inner size (default 1024; base: 2048).
        encoder_layers, decoder_layers: N (default 3 and 3; base: 6 and 6).
        dropout: on embedding sums and residuals (default 0.1).
        activation_dropout: after the FFN's ReLU (default 0.0).
        norm: 'post' (the paper) or 'pre' (default 'post').
        positional: the positional block (default sinusoidal).
        attention: the attention block of every sublayer: heads J, scorer a(k, q), normaliser,
            aggregator, dropout on α (default multihead: 8 scaled-dot heads, concat + W^O).
        tie_embeddings: 'all', 'decoder' or 'none' (default 'all'; see above).
        scale_embeddings: multiply embeddings by √d (default True).
    Shape:
        forward: src (B, S), src_lengths (B,), tgt_in (B, T) -> logits (B, T, tgt_vocab), weights
        (B, T, J, S) of the last decoder layer's encoder–decoder attention, or None.
    """

    @classmethod
    def check_config(cls, cfg: dict) -> None:
        """The attention's heads divide d_model, ``tie_embeddings=all`` has one vocabulary for
        both sides (two of the same size would tie unrelated tokens), and a bounded positional
        table covers the longest sequence the data gives."""
        if (cfg.get("model") or {}).get("name") == "transformer":
            model = cfg["model"]
            check_model_heads(model)
            if (model.get("positional") or {}).get("max_len"):
                check_table_covers(model["positional"],
                                   DATA.ask(cfg["data"], "longest_positions", "data"), "positional")
            if model["tie_embeddings"] == "all" and DATA.ask(cfg["data"], "one_vocabulary", "data") is False:
                raise ConfigError(
                    "model 'transformer': tie_embeddings=all (the default) shares one embedding "
                    "matrix between source and target tokens, but data.shared_vocab=false gives each "
                    "side its own vocabulary, where row i is one token in the source and another in "
                    "the target; set data.shared_vocab=true (one joint vocabulary) or "
                    "model.tie_embeddings=decoder")

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
                f"model 'transformer': tie_embeddings='all' shares one embedding between source and "
                f"target, which needs one shared vocabulary, but src_vocab={src_vocab} and "
                f"tgt_vocab={tgt_vocab}; use model.tie_embeddings=decoder (or a joint vocabulary)")
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
