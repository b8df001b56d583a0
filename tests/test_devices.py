"""``trainer.devices`` is checked before any work (attnflow.training.distributed.parse_devices) and agrees
with what Lightning itself accepts when it builds the Trainer: Lightning's parsers are the oracle."""

from __future__ import annotations

import warnings

import pytest

from attnflow.training.distributed import parse_devices
from attnflow.config.registry import ConfigError

FORMS = ["auto", 1, 2, "2", " 3 ", -1, "-1", 0, "0", -5, "abc", "", [0], [1, 3], [0, 0], [], "0,1",
         "1,", "0, 2", "0;1"]


def _lightning_cpu_accepts(devices) -> bool:
    import pytorch_lightning as pl

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            pl.Trainer(accelerator="cpu", devices=devices, logger=False, enable_checkpointing=False,
                       enable_progress_bar=False, enable_model_summary=False)
    except Exception:  # noqa: BLE001  (TypeError, ValueError, MisconfigurationException)
        return False
    return True


def _lightning_gpu_accepts(devices, monkeypatch) -> bool:
    """Lightning's GPU id parser, on a stand-in machine with four CUDA GPUs."""
    from lightning_fabric.utilities import device_parser

    monkeypatch.setattr(device_parser, "_get_all_available_gpus", lambda **_: [0, 1, 2, 3])
    try:
        return device_parser._parse_gpu_ids(devices, include_cuda=True) is not None
    except Exception:  # noqa: BLE001
        return False


def _accepts(devices, accelerator) -> bool:
    try:
        parse_devices(devices, accelerator)
    except ConfigError:
        return False
    return True


@pytest.mark.parametrize("devices", FORMS, ids=repr)
def test_cpu_devices_accepted_exactly_where_lightning_accepts_them(devices):
    assert _accepts(devices, "cpu") == _lightning_cpu_accepts(devices)


@pytest.mark.parametrize("devices", [d for d in FORMS if d != "auto"], ids=repr)
def test_gpu_devices_accepted_exactly_where_lightning_accepts_them(devices, monkeypatch):
    """(``auto`` is resolved by Lightning's accelerator connector before this parser.)"""
    assert _accepts(devices, "gpu") == _lightning_gpu_accepts(devices, monkeypatch)


@pytest.mark.parametrize("devices, parsed", [("auto", "auto"), (" 3 ", 3), ("-1", -1), ("0, 2", [0, 2]),
                                             ("1,", [1]), ([1, 3], [1, 3])])
def test_devices_are_read_as_lightning_reads_them(devices, parsed):
    assert parse_devices(devices, "gpu") == parsed


@pytest.mark.parametrize("accelerator", ["cpu", "gpu"])
def test_a_bool_is_not_a_count(accelerator):
    """Lightning reads ``devices=True`` as 1; a YAML ``true`` there is a slip, so it is refused."""
    assert not _accepts(True, accelerator)


def test_the_refusal_names_the_field_and_the_forms():
    with pytest.raises(ConfigError) as err:
        parse_devices("two", "gpu")
    assert "trainer.devices (at 'trainer.devices') must be auto; a count" in str(err.value)
    assert "'two'" in str(err.value)
    with pytest.raises(ConfigError) as err:
        parse_devices([0, 1], "cpu")
    assert "on the CPU trainer.devices counts processes" in str(err.value)
