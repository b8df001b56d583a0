"""Image captioning with visual attention: an image encoder's regions, a translation decoder.

Xu et al. 2015, "Show, Attend and Tell", §3.1, §4.2, eq. (8)–(13): regions a_1 … a_L, and an
LSTM that attends over them with its previous state (soft attention):

    e_ti = f_att(a_i, h_{t−1}),  α_t = SoftMax(e_t),  ẑ_t = Σ_i α_ti a_i
    h_t  = LSTM(h_{t−1}, [E y_{t−1}; ẑ_t]),  p(y_t | a, y_<t) = SoftMax(L_o [h_t; ẑ_t; E y_{t−1}])
    h_0  = tanh(W_init · (1/L) Σ_i a_i)

That is the RNNsearch decoder (``rnn_attention``) over the regions, so any registered decoder,
attention and scorer works; the gate β_t (§4.2.1) is ``model.decoder.gate=true``. The output layer
is linear over [h_t; ẑ_t; E y_{t−1}] and c_0 = 0 (the paper's deep output and c_0 map differ).
Images of a batch share one size, so the memory mask is all True.
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch
from torch import nn

from attnflow.models.encoder_decoder import EncoderDecoder
from attnflow.config.registry import (DECODERS, ENCODERS, MODELS, BlockSpec, ConfigError, PositiveInt,
                               Probability)


@MODELS.register("captioner")
class Captioner(EncoderDecoder):
    """p(y | image) = decoder(y_<t, regions(image)) (Xu et al. 2015).

    Shape: images (B, C, H, W) or features (B, L, D), lengths (ignored), tgt_in (B, T)
    -> logits (B, T, V), weights (B, T, J, L) or None.
    """

    interface = "captioning"
    image_encoders = True  # its encoder reads images

    def __init__(self, tgt_vocab: int, pad_id: int = 0, in_channels: Optional[PositiveInt] = None,
                 feature_dim: Optional[int] = None, *,
                 encoder: BlockSpec["encoder"] = {"name": "cnn"},
                 decoder: BlockSpec["decoder"] = {"name": "rnn_attention", "cell": "lstm"},
                 dropout: Probability = 0.0):
        super().__init__()
        kind = ENCODERS.get(encoder["name"]).input_kind
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
        """The encoder reads what the data gives (pixels, or region features)."""
        if cfg["model"].get("name") != "captioner":
            return
        name = (cfg["model"].get("encoder") or {}).get("name", "cnn")
        if name not in ENCODERS:
            return  # the registry names it
        kind = ENCODERS.get(name).input_kind
        given = "image_features" if (cfg.get("data") or {}).get("features") else "image"
        if kind != given:
            raise ConfigError(cls.kind_error(name, kind, given))

    def encode(self, images: torch.Tensor, lengths: Optional[torch.Tensor] = None):
        """Regions (B, L, D), an all-True mask (B, L), and their mean (B, D)."""
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
