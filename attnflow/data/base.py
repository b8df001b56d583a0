"""What the sequence and text data modules share: the three Lightning loaders from one
``_loader(split, train)``, and a test split that may be absent (named, not an empty loader)."""

from __future__ import annotations

from typing import Optional

import pytorch_lightning as pl
from torch.utils.data import DataLoader


class SplitDataModule(pl.LightningDataModule):
    """A data module whose loaders differ only by split: a subclass implements
    ``_loader(split, train)`` and, when its test split can be absent, ``missing_test()``."""

    def _loader(self, split: str, train: bool) -> DataLoader:
        raise NotImplementedError

    def missing_test(self) -> Optional[str]:
        """Why there is no test split (the error's message), or None when there is one."""
        return None

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", True)

    def val_dataloader(self) -> DataLoader:
        return self._loader("val", False)

    def test_dataloader(self) -> DataLoader:
        why = self.missing_test()
        if why:
            raise ValueError(why)
        return self._loader("test", False)
