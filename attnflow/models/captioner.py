"""Image captioning with visual attention: an image encoder's regions, a translation decoder.

Source: Xu et al. 2015, "Show, Attend and Tell: Neural Image Caption Generation with Visual
Attention". An encoder gives L annotation vectors a = {a_1 … a_L}, a_i ∈ R^D, one per image
region (§3.1.1); an LSTM decoder writes the caption word by word, and at every step t attends
over the regions with the previous state (soft attention, §4.2, eq. (8)–(13)):

    e_ti = f_att(a_i, h_{t−1}),  α_ti = exp(e_ti) / Σ_k exp(e_tk),  ẑ_t = Σ_i α_ti a_i
    h_t  = LSTM(h_{t−1}, [E y_{t−1}; ẑ_t]),  p(y_t | a, y_<t) = SoftMax(L_o [h_t; ẑ_t; E y_{t−1}])
    h_0  = tanh(W_init · (1/L) Σ_i a_i)      (§3.1.2: the initial state from the mean annotation)

This is exactly the RNNsearch decoder of translation (``rnn_attention``: Bahdanau et al. 2015)
with the regions as its memory, so the model only pairs an image encoder with a registered
decoder: every attention block and scorer works by override (``scorer=dot|general|additive|…``,
``attention=multihead``), and ``luong`` and ``transformer_decoder`` too (the latter needs the
encoder's ``out_dim`` equal to its ``d_model``). Greedy and beam search are translation's
(:mod:`attnflow.blocks.decoders.decoding`); f_att's output layer differs slightly from the paper's deep output
(a linear layer over [h_t; ẑ_t; E y_{t−1}] rather than L_o(E y + L_h h + L_z ẑ)), and the LSTM's
c_0 is zero (the paper maps the mean annotation to c_0 as well). The paper's gating scalar
β_t = σ(f_β(h_{t−1})) on ẑ_t (§4.2.1) is ``model.decoder.gate=true``.

Images of a batch have one size, so every region is real: the memory mask is all True.
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch
from torch import nn

from attnflow.models.encoder_decoder import EncoderDecoder
from attnflow.config.registry import (DATA, DECODERS, ENCODERS, MODELS, BlockSpec, ConfigError, PositiveInt,
                               Probability)


@MODELS.register("captioner")
class Captioner(EncoderDecoder):
    """p(y | image) = decoder(y_<t, regions(image)) (Xu et al. 2015).

    Args:
        tgt_vocab: caption vocabulary size (context, from the data module).
        pad_id: the padding token id (context).
        in_channels: image channels when the data gives pixels (context; None for features).
        feature_dim: D of precomputed region features when the data gives them (context).
        encoder: the image encoder's config: 'cnn' for pixels, 'features' for precomputed
            regions (default a small CNN).
        decoder: the decoder's config (default LSTM with single-head additive attention, as the
            paper).
        dropout: on the region vectors before the decoder (default 0.0).
    Shape:
        forward: images (B, C, H, W) or features (B, L, D), lengths (ignored), tgt_in (B, T)
        -> logits (B, T, V), weights (B, T, J, L) or None.
    """

    interface = "captioning"
    image_encoders = True  # its encoder reads images (attnflow.training.validate._check_encoder_kinds)

    def __init__(self, tgt_vocab: int, pad_id: int = 0, in_channels: Optional[PositiveInt] = None,
                 feature_dim: Optional[int] = None, *,
                 encoder: BlockSpec["encoder"] = {"name": "cnn"},
                 decoder: BlockSpec["decoder"] = {"name": "rnn_attention", "cell": "lstm"},
                 dropout: Probability = 0.0):
        super().__init__()
        kind = getattr(ENCODERS.get(encoder["name"]), "input_kind", None)
        given = "image_features" if feature_dim else "image"
        if kind != given:
            raise ConfigError(self.kind_error(encoder["name"], kind, given))
        self.encoder = ENCODERS.build(encoder, feature_dim if feature_dim else (in_channels or 3))
        self.input_kind = kind
        self.dropout = nn.Dropout(dropout)
        dim = self.encoder.output_dim
        self.decoder = DECODERS.build(decoder, tgt_vocab, dim, dim)

    @staticmethod
    def kind_error(name: str, kind: Optional[str], given: str) -> str:
        what = {"image": "pixels (images)", "image_features": "region features"}
        fits = {"image": "cnn", "image_features": "features"}[given]
        reads = what.get(kind, "token sequences")
        return (f"model.encoder: encoder '{name}' reads {reads}, but the data gives "
                f"{what[given]}; use model.encoder.name={fits}"
                + (" (and unset data.features for pixels)" if given == "image_features" else ""))

    @classmethod
    def check_config(cls, cfg: dict) -> None:
        """The encoder reads what the data gives (pixels, or region features with
        ``data.features``), and its grid over the data's images leaves at least one region."""
        if cfg["model"].get("name") != "captioner":
            return
        name = (cfg["model"].get("encoder") or {}).get("name", "cnn")
        if name not in ENCODERS:
            return  # the registry names it
        kind = getattr(ENCODERS.get(name), "input_kind", None)
        given = "image_features" if (cfg.get("data") or {}).get("features") else "image"
        if kind != given:
            raise ConfigError(cls.kind_error(name, kind, given))
        side = DATA.ask(cfg["data"], "image_side", "data") if given == "image" else None
        if side:  # the encoder's grid over the data's images: at least one region
            encoder_cfg = cfg["model"]["encoder"]
            with torch.device("meta"):
                encoder = ENCODERS.build(encoder_cfg, 3, path="model.encoder")
            grid = getattr(encoder, "grid", None)
            if grid is not None and min(grid(side[1], side[1])) < 1:
                raise ConfigError(
                    f"model.encoder: images of {side[1]}×{side[1]} pixels ({side[0]}) are smaller "
                    f"than one grid cell of encoder '{name}' ({encoder.stride} pixels a side), so no "
                    f"region would be left; use fewer stages (model.encoder.channels), a smaller "
                    f"model.encoder.pool_size, or larger images")

    def encode(self, images: torch.Tensor, lengths: Optional[torch.Tensor] = None):
        """Regions (B, L, D), an all-True mask (B, L), and their mean (B, D) for the decoder's
        initial state."""
        regions, _ = self.encoder(images)
        regions = self.dropout(regions)
        mask = torch.ones(regions.shape[:2], dtype=torch.bool, device=regions.device)
        return regions, mask, regions.mean(1)

    def grid(self, images: torch.Tensor) -> Tuple[int, int]:
        """(h, w) of the region grid for a batch of images (or features)."""
        if self.input_kind == "image":
            return self.encoder.grid(images.shape[-2], images.shape[-1])
        return self.encoder.grid(images.shape[-2])

    def region_boxes(self, images: torch.Tensor,
                     pixel_size: Optional[Tuple[int, int]] = None) -> torch.Tensor:
        """(L, 4) [top, left, bottom, right) pixel boxes of the regions, row-major: of the images
        themselves, or for features of an image of ``pixel_size`` (H, W)."""
        if self.input_kind == "image":
            return self.encoder.region_boxes(images.shape[-2], images.shape[-1])
        if pixel_size is None:
            raise ValueError("region_boxes of region features needs pixel_size=(H, W)")
        return self.encoder.region_boxes(images.shape[-2], *pixel_size)
