"""Data modules (LightningDataModules), registered in ``DATA``."""

from attnflow.data.synthetic import ReverseDataModule

__all__ = ["ReverseDataModule"]
