"""``trainer.precision=auto``, and a warning where bf16 is asked of hardware that emulates it.

bfloat16 (Kalamkar et al. 2019) in mixed precision (Micikevicius et al. 2018) saves time only
where the hardware multiplies bfloat16 itself: NVIDIA GPUs from Ampere on and x86 CPUs with
AVX512-BF16 or AMX (aarch64: ``bf16``). Elsewhere a step is many times slower than float32
(11–13× for a d=256 Transformer on an AVX2 CPU; docs/benchmarks.md). ``auto`` is ``bf16-mixed``
where it is native, else ``32-true``, chosen again on resume; an explicit bf16 where it is
emulated runs, with a warning naming the fix.
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
        probes = {"AVX512-BF16": torch.cpu._is_avx512_bf16_supported,  # torch's own probes (no
                  "AMX": torch.cpu._is_amx_tile_supported}  # public API says bf16)
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
    """The Trainer arguments with ``precision: auto`` made concrete, a message for the log (or
    None) and whether it is a warning (bf16 where it is emulated)."""
    precision, accelerator = trainer.get("precision"), trainer.get("accelerator", "auto")
    if precision != AUTO and str(precision) not in BF16:
        return trainer, None, False
    native, why = native_bf16(accelerator)
    if precision == AUTO:
        chosen = "bf16-mixed" if native else "32-true"
        return {**trainer, "precision": chosen}, f"trainer.precision=auto: {chosen} ({why})", False
    if native is not False:  # (native, or cannot tell)
        return trainer, None, False
    where = (f": {why}; a step may be slower than 32-true (or 16-mixed)" if _uses_cuda(accelerator)
             else f" on a CPU without native bfloat16 ({why}): a step is many times slower")
    return trainer, f"trainer.precision={precision}{where}; set trainer.precision=32-true or auto", True
