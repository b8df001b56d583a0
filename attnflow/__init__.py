"""attnflow: attention models as compositions of registered blocks, configured with Hydra and
trained with PyTorch Lightning.

Importing the package registers every built-in block (scorers, normalisers, aggregators, attention,
encoders, decoders, models, data modules, tasks, loggers) and any third-party blocks of the
``attnflow.blocks`` entry-point group (loaded on first lookup).
"""

__version__ = "0.1.0"

from attnflow import blocks, data, loggers, models, tasks  # noqa: F401,E402  (registration)
from attnflow.registry import ConfigError, Registry  # noqa: E402

__all__ = ["ConfigError", "Registry", "__version__"]

from pathlib import Path as _Path  # noqa: E402

from omegaconf import OmegaConf as _OmegaConf  # noqa: E402

# ${attnflow_root:} in conf/paths: the project checkout (the folder holding conf/ and attnflow/)
_OmegaConf.register_new_resolver(
    "attnflow_root", lambda: str(_Path(__file__).resolve().parent.parent), replace=True)
