"""Timing shared by the training-step benchmarks (bert.py, transformer_throughput.py,
translation_step.py, gpu_attention.py): variants alternate, their order reversed every other
repetition, so a machine whose speed drifts (other jobs, clocks) affects them alike; and what their
JSON files record of the machine and the checkout."""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Callable, Dict, Optional, Union

import torch

#: --dtype choices of the GPU benchmarks (autocast dtypes)
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def time_variants(steps: Dict[str, Callable], repeats: int, number: int, warmup: int,
                  tokens: Union[int, Dict[str, int]], sync: Callable[[], None] = lambda: None,
                  events: bool = False):
    """tokens/s samples per variant: ``warmup`` untimed steps each, then ``repeats`` samples of
    ``number`` steps, the variants alternating, their order reversed every other repetition.
    ``tokens``: the tokens of one step, the same for every variant or one count per variant.
    ``sync`` waits for queued device work (``torch.cuda.synchronize`` on a GPU): called before a
    sample starts and before it ends, so a sample times its own kernels, not the last one's.
    ``events``: a sample's time is the GPU's, from a CUDA event recorded before its first step to
    one after its last (``torch.cuda.Event.elapsed_time``), not ``time.perf_counter``'s."""
    per_step = tokens if isinstance(tokens, dict) else dict.fromkeys(steps, tokens)
    for s in steps.values():
        for _ in range(warmup):
            s()
    samples = {k: [] for k in steps}
    order = list(steps)
    for r in range(repeats):
        for k in (order if r % 2 == 0 else order[::-1]):
            sync()
            if events:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
            t0 = time.perf_counter()
            for _ in range(number):
                steps[k]()
            if events:
                end.record()
                end.synchronize()
                seconds = start.elapsed_time(end) / 1e3
            else:
                sync()
                seconds = time.perf_counter() - t0
            samples[k].append(per_step[k] * number / seconds)
    return samples


def print_rates(samples: Dict[str, list], label: str, columns: Optional[Dict[str, Dict[str, str]]] = None,
                width: int = 10) -> Dict[str, float]:
    """A table of ``samples`` (tokens/s per variant): the median, min and max of each, after any
    ``columns`` (heading → cell text per variant); returns the medians."""
    columns = columns or {}
    med = {k: statistics.median(v) for k, v in samples.items()}
    extra = "".join(f"{h:>12}" for h in columns)
    print(f"{label:<{width}}{extra}{'tok/s median':>15}{'min':>10}{'max':>10}")
    for k, v in samples.items():
        cells = "".join(f"{col[k]:>12}" for col in columns.values())
        print(f"{k:<{width}}{cells}{med[k]:>15.0f}{min(v):>10.0f}{max(v):>10.0f}")
    return med


def write_result(path: str, name: str, load_start: float, **figures) -> None:
    """``figures`` as JSON at ``path``, with the benchmark's name, the UTC time, the versions,
    threads and CPUs, and the load average at the start and now."""
    result = {"benchmark": name, "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
              **figures, "torch": torch.__version__, "threads": torch.get_num_threads(),
              "cpu_count": os.cpu_count(), "python": platform.python_version(),
              "loadavg_start": load_start, "loadavg_end": os.getloadavg()[0]}
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(result, indent=2))


def result_path(name: str, started: _dt.datetime, out: Optional[str] = None) -> Path:
    """``out``, else ``bench/results/<name>-<UTC date>.json`` (``<date>T<time>`` when that file
    exists: a second run the same day keeps the first's figures)."""
    if out:
        return Path(out)
    path = Path(__file__).resolve().parent / "results" / f"{name}-{started:%Y-%m-%d}.json"
    return path.with_name(f"{name}-{started:%Y-%m-%dT%H%M%S}.json") if path.exists() else path


def git_commit() -> str:
    """The checkout's HEAD commit, read from .git (no git process); 'unknown' outside a clone."""
    git = Path(__file__).resolve().parent.parent / ".git"
    try:
        head = (git / "HEAD").read_text().strip()
        if not head.startswith("ref: "):
            return head
        ref = head[5:]
        if (git / ref).exists():
            return (git / ref).read_text().strip()
        for line in (git / "packed-refs").read_text().splitlines():
            if line.endswith(" " + ref):
                return line.split()[0]
    except OSError:
        pass
    return "unknown"


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine(device: str = "cpu") -> Dict[str, object]:
    """The CPU, its count and the platform; on a CUDA ``device`` the GPU's name and memory too."""
    info: Dict[str, object] = {"cpu": cpu_model(), "cpu_count": os.cpu_count(),
                               "platform": platform.platform()}
    if torch.device(device).type == "cuda":
        props = torch.cuda.get_device_properties(device)
        info.update(gpu=props.name, gpu_memory_gib=round(props.total_memory / 2**30, 1),
                    cuda=torch.version.cuda)
    return info
