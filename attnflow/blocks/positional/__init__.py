"""Positional encodings: sinusoidal, learned, none, relative (Shaw et al. 2018)."""
