"""``trainer.precision=auto``, and a warning where bf16 is asked of hardware that emulates it.

bfloat16 (Kalamkar et al. 2019, "A Study of BFLOAT16 for Deep Learning Training") in mixed
precision (Micikevicius et al. 2018: float32 master weights, half-precision products) saves time
only where the hardware multiplies bfloat16 itself: NVIDIA GPUs from Ampere on (compute
capability ≥ 8.0) and x86 CPUs with AVX512-BF16 or AMX (aarch64: the ``bf16`` feature). Elsewhere
bfloat16 products fall back to slow kernels, and a step becomes many times slower
than plain float32: on an AMD EPYC (Zen 3, AVX2 only), one thread, the d=256 3+3-layer
Transformer's training step (``bench/translation_step.py --compare-bf16``, B=64) ran at 0.078 and
0.089 of float32's token rate under bf16 autocast, 11–13× slower (2026-11-27; docs/benchmarks.md,
"bf16 on a CPU without it"). A time-boxed recipe that asks for bf16 there trains a tenth of its
steps.

So attnflow adds one value to Lightning's ``trainer.precision``:

- ``auto``: ``bf16-mixed`` where the accelerator the run will use has native bfloat16, else
  ``32-true``; the choice is printed, recorded in ``metrics.json`` (``precision``), and made
  again on resume (a run resumed on other hardware takes what is fast there; the weights are
  float32 either way). ``config.yaml`` keeps ``auto``, as asked.
- an explicit ``bf16-mixed``/``bf16-true`` (or ``bf16``) on a CPU known to lack native bfloat16,
  or on a GPU that emulates it, takes effect, as every override does, with a warning that names
  the field, the slowdown and the fix (a stopped run may take the fix too: ``resume=<run>
  trainer.precision=auto``, :data:`attnflow.training.resume.FLOAT32_WEIGHTS`).
"""

from __future__ import annotations

import platform
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

import torch

AUTO = "auto"
BF16 = ("bf16-mixed", "bf16-true", "bf16")  # Lightning's names of bfloat16 precisions
CPU_INFO = Path("/proc/cpuinfo")


def cpu_bf16() -> Tuple[Optional[bool], str]:
    """Whether this CPU multiplies bfloat16 natively (None: cannot tell), and what was found."""
    machine = platform.machine().lower()
    if machine in ("x86_64", "amd64", "i386", "i686"):
        probes = {label: getattr(torch.cpu, f"_is_{name}_supported", None)  # torch's own probes
                  for label, name in (("AVX512-BF16", "avx512_bf16"), ("AMX", "amx_tile"))}
        if any(p is None for p in probes.values()):  # a torch without the probes: cannot tell
            return None, "this torch cannot probe the CPU for AVX512-BF16 or AMX"
        found = [label for label, probe in probes.items() if probe()]
        if found:
            return True, f"this CPU has {' and '.join(found)}"
        return False, "this CPU has neither AVX512-BF16 nor AMX"
    if machine in ("aarch64", "arm64") and CPU_INFO.is_file():
        for line in CPU_INFO.read_text(errors="replace").splitlines():
            if line.lower().startswith("features"):
                has = "bf16" in line.split(":", 1)[-1].split()
                return has, f"this CPU {'has' if has else 'lacks'} the aarch64 bf16 feature"
    return None, f"attnflow cannot tell whether this {machine or 'unknown'} CPU has native bfloat16"


def _uses_cuda(accelerator: Any) -> bool:
    """Whether Lightning's ``accelerator`` setting will run on a CUDA GPU."""
    if accelerator in ("gpu", "cuda"):
        return True
    return accelerator in (None, "auto") and torch.cuda.is_available()


def native_bf16(accelerator: Any) -> Tuple[Optional[bool], str]:
    """Whether the device ``trainer.accelerator`` chooses has native bfloat16, and why."""
    if _uses_cuda(accelerator):
        if not torch.cuda.is_available():
            return None, "no CUDA GPU is visible"
        native = torch.cuda.is_bf16_supported(including_emulation=False)
        name = torch.cuda.get_device_name(0)
        return native, f"{name} {'computes' if native else 'emulates'} bfloat16"
    if accelerator not in (None, "auto", "cpu"):  # mps, tpu, an Accelerator object: not probed
        return None, f"attnflow does not probe accelerator {accelerator!r} for bfloat16"
    return cpu_bf16()


def resolve_precision(trainer: Dict[str, Any]) -> Tuple[Dict[str, Any], Optional[str], bool]:
    """The Trainer arguments with ``precision: auto`` made concrete, a message for the log (None:
    nothing to say) and whether it is a warning (bf16 asked where it is emulated)."""
    precision, accelerator = trainer.get("precision"), trainer.get("accelerator", "auto")
    if precision == AUTO:
        native, why = native_bf16(accelerator)
        chosen = "bf16-mixed" if native else "32-true"
        return ({**trainer, "precision": chosen},
                f"trainer.precision=auto: {chosen} ({why})", False)
    if str(precision) not in BF16:
        return trainer, None, False
    native, why = native_bf16(accelerator)
    if native is not False:  # native, or attnflow cannot tell: nothing to say
        return trainer, None, False
    if _uses_cuda(accelerator):
        return trainer, (f"trainer.precision={precision}: {why}; a step may be slower than "
                         f"32-true (16-mixed uses this GPU's float16 units); auto picks 32-true"), True
    return trainer, (f"trainer.precision={precision} on a CPU without native bfloat16 ({why}): "
                     f"PyTorch emulates it, and a step is many times slower than 32-true "
                     f"(11–13× for a d=256 Transformer on an AVX2 CPU). Set "
                     f"trainer.precision=32-true, or auto (bf16 only where it is native)"), True
