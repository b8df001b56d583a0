"""Attention across runs: the same examples' attention side by side, its statistics and the
diagnostics of the literature (``attnflow-compare``)."""
