"""BERT: a Transformer encoder over ⟨CLS⟩ S ⟨SEP⟩ S′ ⟨SEP⟩ with MLM and NSP heads.

Source: Devlin et al. 2019, "BERT: Pre-training of deep bidirectional transformers for language
understanding": §3 and Fig. 2 (input = token + segment + position embeddings), §3.1 (masked LM,
next-sentence prediction), Appendix A.2 (GELU, N(0, 0.02²) initialisation); the MLM output layer
shares the token embeddings (Press & Wolf 2017, as the released BERT code does).

    e_t  = Dropout(LN(E_tok x_t + E_seg s_t + P_t))            (embeddings)
    Z    = TransformerEncoder(e)                              (the ``transformer_encoder`` block,
                                                               the translation encoder; GELU FFN)
    MLM:  logits_t = E_tok LN(GELU(W_t z_t + b_t)) + b_V       (tied decoder, own bias)
    NSP:  logits   = W_y tanh(W_s z₀ + b_s) + b_y              (the pooler on ⟨CLS⟩, then W_y;
                                                               the loss applies the softmax)

Positions: ``positional`` learned (BERT's P, ``max_len`` rows) or sinusoidal are added here,
before the LayerNorm, as BERT does; ``relative`` (Shaw et al. 2018) adds nothing and is handed to
the encoder, whose self-attention layers then carry relative-position terms. The encoder gets
``positional: none`` otherwise, so its own dropout is BERT's embedding dropout.
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from attnflow.registry import ENCODERS, MODELS, POSITIONALS, BlockSpec, ConfigError


@MODELS.register("bert")
class BertModel(nn.Module):
    """BERT encoder with pretraining heads (MLM, NSP) and the pooler for fine-tuning heads.

    Args:
        vocab_size: V (context, from the data module).
        pad_id: the padding token id (context).
        d_model: hidden size d (default 256: bert_mini; BERT-base 768).
        layers: N encoder layers (default 4).
        ffn_dim: the FFN's inner size (default 1024 = 4d).
        dropout: on the embeddings and in the residuals (default 0.1).
        activation_dropout: after the FFN's activation (default 0.0).
        max_len: the longest input accepted (default 512); learned positions need
            ``positional.max_len`` (default 512) at least as large.
        type_vocab_size: the number of segment types (default 2: A and B).
        norm: 'post' (BERT) or 'pre' (Xiong et al. 2020) (default 'post').
        activation: the FFN's nonlinearity (default 'gelu', as BERT).
        init_std: σ of the N(0, σ²) initialisation of linear and embedding weights (default 0.02).
        positional: positions (default learned; relative, sinusoidal or none also work).
        attention: the self-attention of every layer (default multihead; the presets set J).
    Shape:
        forward: input_ids, segment_ids (B, T) long, attention_mask (B, T) bool, True at real
        tokens, padding at the end -> hidden (B, T, d), zero at padding. mlm_logits (B, T, V),
        nsp_logits (B, 2), pooled (B, d).
    """

    interface = "pretraining"  # works on MLM + NSP batches (attnflow.run.check_composition)

    def __init__(self, vocab_size: int, pad_id: int = 0, *, d_model: int = 256, layers: int = 4,
                 ffn_dim: int = 1024, dropout: float = 0.1, activation_dropout: float = 0.0,
                 max_len: int = 512, type_vocab_size: int = 2,
                 norm: Literal["post", "pre"] = "post",
                 activation: Literal["relu", "gelu"] = "gelu", init_std: float = 0.02,
                 positional: BlockSpec["positional"] = {"name": "learned"},
                 attention: BlockSpec["attention"] = {"name": "multihead", "heads": 4}):
        super().__init__()
        if type_vocab_size < 1:
            raise ConfigError(f"model 'bert': type_vocab_size must be >= 1, got {type_vocab_size}")
        self.pad_id, self.d_model, self.max_len = pad_id, d_model, max_len
        pos = POSITIONALS.build(positional, d_model, path="positional")
        if getattr(pos, "max_len", max_len) < max_len:
            raise ConfigError(
                f"model 'bert': model.max_len={max_len} is longer than the {pos.max_len} learned "
                f"positions (positional.max_len); raise positional.max_len or lower model.max_len")
        # an absolute encoding is added here, before the LayerNorm (BERT); a relative one goes to
        # the encoder, whose attention layers carry it
        self.positional = None if pos.relative else pos
        self.token_embedding = nn.Embedding(vocab_size, d_model, padding_idx=pad_id)
        self.segment_embedding = nn.Embedding(type_vocab_size, d_model)
        self.embedding_norm = nn.LayerNorm(d_model)
        self.encoder = ENCODERS.build(
            {"name": "transformer_encoder", "d_model": d_model, "layers": layers,
             "ffn_dim": ffn_dim, "dropout": dropout, "activation_dropout": activation_dropout,
             "norm": norm, "activation": activation, "attention": attention,
             "positional": positional if pos.relative else {"name": "none"}},
            d_model, path="model")
        # MLM head: transform (dense, GELU, LN), then the tied decoder with its own bias
        self.mlm_transform = nn.Linear(d_model, d_model)
        self.mlm_norm = nn.LayerNorm(d_model)
        self.mlm_decoder = nn.Linear(d_model, vocab_size)
        self.mlm_decoder.weight = self.token_embedding.weight  # tied: one parameter
        # NSP head: pooler tanh(W_s z₀ + b_s), then W_y
        self.pooler = nn.Linear(d_model, d_model)
        self.nsp = nn.Linear(d_model, 2)
        self._init_weights(init_std)

    def _init_weights(self, std: float) -> None:
        """N(0, std²) weights and zero biases for every linear and embedding map (Devlin et al.
        2019, App. A.2; the released code's truncated normal differs beyond 2σ only); LayerNorms
        keep (1, 0); the padding row is zero."""
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, 0.0, std)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)
        with torch.no_grad():
            self.token_embedding.weight[self.pad_id].zero_()

    def embed(self, input_ids: torch.Tensor, segment_ids: torch.Tensor) -> torch.Tensor:
        """LN(E_tok x + E_seg s + P) (B, T, d), before the encoder's dropout."""
        if input_ids.shape[1] > self.max_len:
            raise ValueError(f"model 'bert': a batch of length {input_ids.shape[1]} is longer than "
                             f"model.max_len={self.max_len}")
        e = self.token_embedding(input_ids) + self.segment_embedding(segment_ids)
        if self.positional is not None:
            e = self.positional(e)
        return self.embedding_norm(e)

    def forward(self, input_ids: torch.Tensor, segment_ids: torch.Tensor,
                attention_mask: torch.Tensor, need_weights: bool = False):
        """hidden (B, T, d), zero at padding; with ``need_weights`` (hidden, [N × (B, J, T, T)]),
        every layer's self-attention weights (query rows, key columns; zero at padding keys)."""
        mask = attention_mask.bool()
        lengths = mask.sum(-1)
        if not torch.equal(mask, torch.arange(mask.shape[1], device=mask.device) < lengths[:, None]):
            raise ValueError("model 'bert': attention_mask must be True on a prefix of each row "
                             "(real tokens first, padding at the end)")
        out = self.encoder(self.embed(input_ids, segment_ids), lengths, need_weights=need_weights)
        return (out[0], out[2]) if need_weights else out[0]

    def mlm_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """(…, T, V): E_tok LN(GELU(W_t z + b_t)) + b_V. Pass only the selected positions'
        vectors (hidden[labels != -100], (M, d)) to spare the V-wide product elsewhere."""
        return self.mlm_decoder(self.mlm_norm(F.gelu(self.mlm_transform(hidden))))

    def pooled(self, hidden: torch.Tensor) -> torch.Tensor:
        """(B, d): tanh(W_s z₀ + b_s), z₀ the ⟨CLS⟩ vector (position 0)."""
        return torch.tanh(self.pooler(hidden[:, 0]))

    def nsp_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """(B, 2): W_y tanh(W_s z₀ + b_s) + b_y; index 0 = S′ follows S, 1 = S′ is random."""
        return self.nsp(self.pooled(hidden))
