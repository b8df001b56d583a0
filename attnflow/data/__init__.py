"""Data modules (LightningDataModules), registered in ``DATA``."""

from attnflow.data.documents import DocumentDataModule
from attnflow.data.parallel import ParallelDataModule
from attnflow.data.planetoid import PlanetoidDataModule
from attnflow.data.synthetic import ReverseDataModule
from attnflow.data.synthetic_graph import SyntheticGraphDataModule

__all__ = ["DocumentDataModule", "ParallelDataModule", "PlanetoidDataModule", "ReverseDataModule",
           "SyntheticGraphDataModule"]
