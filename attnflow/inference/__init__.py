"""Rebuild a trained run and apply it: the Python API behind attnflow-predict, -translate,
-export and -eval, and behind tools that run several runs on the same examples.

:mod:`.runs` opens a run and rebuilds its model (and task) from the config stored in the
checkpoint; one module per kind of run applies it (documents, graphs, BERT texts, captions,
translation), :mod:`.export` writes it in other formats and :mod:`.evaluate` computes its metrics.
"""
