"""The encoder contract: inputs -> (states (B, S, ``output_dim``), final), what a model's
decoder, pooling or head reads.

``input_kind`` says what an encoder reads: None for token embeddings (B, S, D) with lengths,
``"image"`` for pixels, ``"image_features"`` for region features. A model checks it against
what its data gives (:class:`attnflow.models.captioner.Captioner`), and validation refuses an
image encoder in a model that gives token sequences.
"""

from __future__ import annotations

from typing import ClassVar, Optional

from torch import nn


class Encoder(nn.Module):
    """Base class of the registered encoders; a subclass sets ``output_dim``."""

    input_kind: ClassVar[Optional[str]] = None
    output_dim: int
