"""Packages for setuptools (the rest is in pyproject.toml): attnflow* as found, plus the top-level
conf/ installed as the package data of ``attnflow.conf``, so an installed wheel carries its config
tree (``attnflow.config_dir()``), and attnflow's Hydra sweeper under ``hydra_plugins`` (a namespace
package Hydra scans for plugins), also under hydra-optuna-sweeper's name (for old search files).
pyproject.toml alone cannot add a mapped package to found ones."""

from setuptools import find_packages, setup

setup(
    packages=find_packages(include=["attnflow*"]) + ["attnflow.conf", "hydra_plugins",
                                                     "hydra_plugins.attnflow_optuna_sweeper",
                                                     "hydra_plugins.hydra_optuna_sweeper"],
    package_dir={"attnflow.conf": "conf"},
    package_data={"attnflow.conf": ["**/*.yaml"]},
)
