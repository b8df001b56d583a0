"""Data modules (LightningDataModules), registered in ``DATA``."""
