"""attnflow: attention models as compositions of registered blocks, configured with Hydra and
trained with PyTorch Lightning. Importing it is light: registries import their blocks on lookup."""

__version__ = "0.1.0"

from attnflow.config.registry import ConfigError, Registry  # noqa: E402

__all__ = ["ConfigError", "Registry", "__version__", "config_dir"]

from importlib import resources as _resources  # noqa: E402
from pathlib import Path as _Path  # noqa: E402

from omegaconf import OmegaConf as _OmegaConf  # noqa: E402


def config_dir() -> _Path:
    """The Hydra config tree: the checkout's ``conf/``, else the copy installed with the package."""
    checkout = _Path(__file__).resolve().parent.parent / "conf"
    if (checkout / "train.yaml").is_file():
        return checkout
    return _Path(str(_resources.files(__name__) / "conf"))


# ${attnflow_root:} in conf/paths: the folder holding the package (a checkout's root)
_OmegaConf.register_new_resolver(
    "attnflow_root", lambda: str(_Path(__file__).resolve().parent.parent), replace=True)
