"""Blocks: the registered pieces that models are built from, one block per file.

Nothing is imported here: each registry imports the modules of its folder on its first lookup
(``attnflow.config.registry``), so a new block is one new file."""
