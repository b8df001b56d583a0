"""Aggregators of multi-head outputs: mean, concat, concat + projection."""
