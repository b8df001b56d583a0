"""Attention scorers a(k, q), one per file, registered in ``SCORERS``."""
