"""Configuration: the block registries (a config name to a class, its typed fields) and the
contract of the composed config (shared groups, typed overrides). Imports io only."""
