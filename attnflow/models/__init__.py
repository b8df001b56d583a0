"""Models: compositions of blocks."""
