"""attnflow: attention models as compositions of registered blocks, configured with Hydra and
trained with PyTorch Lightning. Importing it is light: registries import their blocks on lookup."""

__version__ = "0.1.0"

from attnflow.config.registry import ConfigError, Registry  # noqa: E402

__all__ = ["ConfigError", "Registry", "__version__", "config_dir", "data_dir"]

from importlib import resources as _resources  # noqa: E402
from pathlib import Path as _Path  # noqa: E402

from omegaconf import OmegaConf as _OmegaConf  # noqa: E402


def config_dir() -> _Path:
    """The Hydra config tree: the checkout's ``conf/``, else the copy installed with the package."""
    checkout = _Path(__file__).resolve().parent.parent / "conf"
    if (checkout / "train.yaml").is_file():
        return checkout
    return _Path(str(_resources.files(__name__) / "conf"))


def data_dir(root: _Path | None = None) -> str:
    """The data root: ``$ATTNFLOW_DATA_DIR``; else ``data/`` in the working directory if there is
    one; else, in a source checkout (``root``, default the folder holding the package, with
    ``conf/``, not under site-packages), its sibling ``../shared/data`` if it exists; else ``data``
    in the working directory (named by the messages of missing files)."""
    import os

    if os.environ.get("ATTNFLOW_DATA_DIR"):
        return os.environ["ATTNFLOW_DATA_DIR"]
    here = _Path("data").resolve()
    root = _Path(root or _Path(__file__).resolve().parent.parent)
    shared = root.parent / "shared" / "data"
    installed = {"site-packages", "dist-packages"} & set(root.parts)
    if not here.is_dir() and not installed and (root / "conf").is_dir() and shared.is_dir():
        return str(shared)
    return str(here)


# ${attnflow_root:} in conf/paths: the folder holding the package (a checkout's root);
# ${attnflow_data:}: the data root (:func:`data_dir`)
_OmegaConf.register_new_resolver(
    "attnflow_root", lambda: str(_Path(__file__).resolve().parent.parent), replace=True)
_OmegaConf.register_new_resolver("attnflow_data", data_dir, replace=True)
