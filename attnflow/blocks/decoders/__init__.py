"""Decoders; the decoder protocol is in :mod:`attnflow.blocks.decoders.base`."""
