"""Attention blocks: single-head and multi-head attention, the shared computation, the penalty."""
