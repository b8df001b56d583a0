"""attnflow: attention models as compositions of registered blocks, configured with Hydra and
trained with PyTorch Lightning.

Importing the package is light (no Lightning, no PyG): each registry imports the modules of its
built-in blocks (scorers, normalisers, aggregators, attention, encoders, decoders, models, data
modules, tasks, loggers) and the third-party blocks of the ``attnflow.blocks`` entry-point group
on its first lookup.
"""

__version__ = "0.1.0"

from attnflow.config.registry import ConfigError, Registry  # noqa: E402

__all__ = ["ConfigError", "Registry", "__version__", "config_dir"]

from importlib import resources as _resources  # noqa: E402
from pathlib import Path as _Path  # noqa: E402

from omegaconf import OmegaConf as _OmegaConf  # noqa: E402


def config_dir() -> _Path:
    """The Hydra config tree: the checkout's top-level ``conf/`` (a checkout or an editable install,
    where users edit it), else the copy installed with the package (``attnflow/conf``)."""
    checkout = _Path(__file__).resolve().parent.parent / "conf"
    if (checkout / "train.yaml").is_file():
        return checkout
    return _Path(str(_resources.files(__name__) / "conf"))


# ${attnflow_root:} in conf/paths: the project checkout (the folder holding conf/ and attnflow/);
# for an installed wheel, the folder holding the package
_OmegaConf.register_new_resolver(
    "attnflow_root", lambda: str(_Path(__file__).resolve().parent.parent), replace=True)
