"""Aggregators of multi-head outputs (SPEC §2): mean, concat, concat + projection."""

from attnflow.blocks.aggregators.base import Aggregator
from attnflow.blocks.aggregators.concat import ConcatAggregator
from attnflow.blocks.aggregators.concat_proj import ConcatProjAggregator
from attnflow.blocks.aggregators.mean import MeanAggregator

__all__ = ["Aggregator", "ConcatAggregator", "ConcatProjAggregator", "MeanAggregator"]
