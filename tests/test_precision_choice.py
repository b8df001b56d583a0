"""``trainer.precision=auto`` and the warning for bf16 where it is emulated (attnflow.training.precision).

What is checked:
- the CPU probe agrees with an independent reading of the kernel's CPU flags (/proc/cpuinfo:
  ``avx512_bf16``, ``amx_bf16``/``amx_tile``) where there is one;
- ``auto`` becomes bf16-mixed exactly where the chosen device has native bfloat16 (the probes
  stood in for: a CPU with and without, a CPU attnflow cannot read, a GPU that emulates it);
- an explicit bf16 on a CPU without native bfloat16 warns, naming the field and the fix, and
  nowhere else;
- the runner: ``auto`` is accepted, a misspelt value refused by Lightning; a
  real run under ``auto`` computes in the chosen precision (its Linear layers' output dtype) and
  records it in ``metrics.json``; ``attnflow-eval`` takes ``trainer.precision=auto`` too.
"""

from __future__ import annotations

import json
import platform
from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch

import attnflow.training.precision as precision
import attnflow.training.run as run
from attnflow.config.registry import ConfigError
from support import compose_cfg

TINY = ["data.train_size=64", "data.val_size=32", "data.test_size=32", "data.batch_size=32",
        "trainer.max_epochs=1", "trainer.accelerator=cpu", "callbacks.progress_bar=none",
        "logger=none", "callbacks.attention_maps=null", "trainer.num_sanity_val_steps=0",
        "test=false", "trainer.enable_model_summary=false"]


def _kernel_flags() -> set:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


@pytest.mark.skipif(platform.machine() != "x86_64" or not Path("/proc/cpuinfo").is_file(),
                    reason="the kernel's CPU flags are read from Linux's /proc/cpuinfo on x86_64")
def test_cpu_probe_agrees_with_the_kernels_flags():
    flags = _kernel_flags()
    native, why = precision.cpu_bf16()
    assert native == bool({"avx512_bf16", "amx_bf16", "amx_tile"} & flags), (why, sorted(flags))
    assert ("neither" in why) == (not native)


@pytest.mark.parametrize("native, chosen", [(True, "bf16-mixed"), (False, "32-true"), (None, "32-true")])
def test_auto_is_bf16_only_where_native(monkeypatch, native, chosen):
    monkeypatch.setattr(precision, "cpu_bf16", lambda: (native, "the stand-in CPU"))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    args, note, warn = precision.resolve_precision({"precision": "auto", "accelerator": "auto", "devices": 1})
    assert args == {"precision": chosen, "accelerator": "auto", "devices": 1}
    assert note == f"trainer.precision=auto: {chosen} (the stand-in CPU)" and warn is False


def test_auto_on_a_gpu_that_emulates_bf16(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: including_emulation)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=0: "Tesla V100")
    monkeypatch.setattr(precision, "cpu_bf16", lambda: pytest.fail("the CPU was probed for a GPU run"))
    for accelerator in ("gpu", "cuda", "auto"):
        args, note, _ = precision.resolve_precision({"precision": "auto", "accelerator": accelerator})
        assert args["precision"] == "32-true" and "Tesla V100 emulates" in note
    args, note, warn = precision.resolve_precision({"precision": "bf16-mixed", "accelerator": "gpu"})
    assert args["precision"] == "bf16-mixed" and warn and "16-mixed" in note  # takes effect, warned


@pytest.mark.parametrize("gpu, native, chosen", [("NVIDIA A100", True, "bf16-mixed"),
                                                 ("Tesla V100", False, "32-true")])
def test_the_gpu_trainer_takes_bf16_only_where_the_gpu_computes_it(monkeypatch, gpu, native, chosen):
    """``trainer=gpu`` asks for ``auto``: bf16-mixed on an Ampere GPU, 32-true (not emulated bf16,
    and no warning) on an older one."""
    from omegaconf import OmegaConf

    trainer = OmegaConf.to_container(compose_cfg(["trainer=gpu"]).trainer, resolve=True)
    assert trainer["accelerator"] == "gpu" and trainer["precision"] == "auto"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported",
                        lambda including_emulation=True: native or including_emulation)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=0: gpu)
    args, note, warn = precision.resolve_precision(trainer)
    assert args["precision"] == chosen and gpu in note and warn is False


@pytest.mark.parametrize("value", ["bf16-mixed", "bf16-true", "bf16"])
def test_explicit_bf16_on_an_emulating_cpu_warns(monkeypatch, value):
    monkeypatch.setattr(precision, "cpu_bf16", lambda: (False, "this CPU has neither AVX512-BF16 nor AMX"))
    args, note, warn = precision.resolve_precision({"precision": value, "accelerator": "cpu"})
    assert args["precision"] == value  # the override takes effect
    assert warn and note.startswith(f"trainer.precision={value} on a CPU without native bfloat16")
    assert "trainer.precision=32-true" in note and "auto" in note


@pytest.mark.parametrize("native, value", [(True, "bf16-mixed"), (None, "bf16-mixed"), (False, "32-true"),
                                           (False, "16-mixed")])
def test_nothing_to_say_elsewhere(monkeypatch, native, value):
    monkeypatch.setattr(precision, "cpu_bf16", lambda: (native, "the stand-in CPU"))
    assert precision.resolve_precision({"precision": value, "accelerator": "cpu"}) == (
        {"precision": value, "accelerator": "cpu"}, None, False)


def test_aarch64_reads_the_bf16_feature(monkeypatch, tmp_path):
    info = tmp_path / "cpuinfo"
    monkeypatch.setattr(precision.platform, "machine", lambda: "aarch64")
    monkeypatch.setattr(precision, "CPU_INFO", info)
    info.write_text("processor\t: 0\nFeatures\t: fp asimd sve bf16 i8mm\n")
    assert precision.cpu_bf16()[0] is True
    info.write_text("processor\t: 0\nFeatures\t: fp asimd evtstrm aes\n")
    assert precision.cpu_bf16()[0] is False
    monkeypatch.setattr(precision.platform, "machine", lambda: "ppc64le")
    assert precision.cpu_bf16()[0] is None


def test_the_runner_accepts_auto_and_lightning_refuses_a_misspelling(tmp_path):
    run.build_trainer(run.resolve_config(compose_cfg(["trainer.precision=auto"])), tmp_path)
    with pytest.raises(ConfigError, match=r"^trainer: Precision 'automatic' is invalid"):
        run.build_trainer(run.resolve_config(compose_cfg(["trainer.precision=automatic"])), tmp_path)


class Dtypes(pl.Callback):
    """The output dtypes of the model's Linear layers during training steps."""

    def __init__(self):
        self.seen: set = set()

    def on_train_start(self, trainer, pl_module):
        self.hooks = [m.register_forward_hook(lambda mod, i, out: self.seen.add(out.dtype))
                      for m in pl_module.modules() if isinstance(m, torch.nn.Linear)]

    def on_train_end(self, trainer, pl_module):
        for h in self.hooks:
            h.remove()


@pytest.mark.parametrize("native, chosen, dtype", [(False, "32-true", torch.float32),
                                                    (True, "bf16-mixed", torch.bfloat16)])
def test_a_run_under_auto_trains_in_the_chosen_precision(tmp_path, monkeypatch, native, chosen, dtype):
    monkeypatch.setattr(precision, "cpu_bf16", lambda: (native, "the stand-in CPU"))
    watch = Dtypes()
    build = run.build_callbacks
    monkeypatch.setattr(run, "build_callbacks", lambda *a, **k: [*build(*a, **k), watch])
    summary = run.train(compose_cfg([*TINY, "trainer.precision=auto"]), tmp_path / "run")
    assert watch.seen == {dtype}
    assert summary["precision"] == chosen
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["precision"] == chosen
    assert (tmp_path / "run" / "config.yaml").read_text().count("precision: auto") == 1  # as asked


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device (bench/gpu_check.sh's machine)")
def test_the_gpu_trainer_on_this_gpu_trains_bf16_from_ampere_on(tmp_path, monkeypatch):
    """``trainer=gpu`` (precision auto) on the real GPU: NVIDIA's tensor cores compute bfloat16
    from compute capability 8.0 (Ampere) on, so there bf16-mixed runs, before it 32-true."""
    native = torch.cuda.get_device_capability(0) >= (8, 0)
    watch = Dtypes()
    build = run.build_callbacks
    monkeypatch.setattr(run, "build_callbacks", lambda *a, **k: [*build(*a, **k), watch])
    tiny = [o for o in TINY if not o.startswith("trainer.accelerator")]
    summary = run.train(compose_cfg(["trainer=gpu", *tiny]), tmp_path / "run")
    assert watch.seen == {torch.bfloat16 if native else torch.float32}, watch.seen
    assert summary["precision"] == ("bf16-mixed" if native else "32-true")


@pytest.mark.slow
def test_eval_takes_auto(tmp_path, monkeypatch, capsys):
    from attnflow.cli.evaluate import evaluate

    run.train(compose_cfg(TINY), tmp_path / "run")
    monkeypatch.setattr(precision, "cpu_bf16", lambda: (False, "the stand-in CPU"))
    summary, _ = evaluate(tmp_path / "run", ["trainer.precision=auto"], out=str(tmp_path / "eval.json"))
    assert "trainer.precision=auto: 32-true (the stand-in CPU)" in capsys.readouterr().err
    assert summary["metrics"]


@pytest.mark.slow
def test_a_run_with_explicit_bf16_on_an_emulating_cpu_warns_and_runs_bf16(tmp_path, monkeypatch):
    monkeypatch.setattr(precision, "cpu_bf16", lambda: (False, "the stand-in CPU"))
    with pytest.warns(UserWarning, match=r"trainer\.precision=bf16-mixed on a CPU without native bfloat16"):
        summary = run.train(compose_cfg([*TINY, "trainer.precision=bf16-mixed"]), tmp_path / "run")
    assert summary["precision"] == "bf16-mixed"
