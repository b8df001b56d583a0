"""Positional encodings (SPEC §3): sinusoidal, learned, none, relative (Shaw et al. 2018)."""

from attnflow.blocks.positional.base import Positional, require_absolute
from attnflow.blocks.positional.sinusoidal import SinusoidalPositional, sinusoid_table
from attnflow.blocks.positional.learned import LearnedPositional
from attnflow.blocks.positional.none import NoPositional
from attnflow.blocks.positional.relative import RelativePositional

__all__ = ["Positional", "SinusoidalPositional", "LearnedPositional", "NoPositional",
           "RelativePositional", "require_absolute", "sinusoid_table"]
