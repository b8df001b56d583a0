"""bench/gpu_attention.py at its CPU smoke size (--tiny): every scorer on every backend it allows
gets a timed row, checked against the explicit path, with its ratios; flex forward only on a CPU.
One run in a fresh interpreter (the script raises dynamo's recompile limits and filters a warning)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from support import ROOT, load_bench


pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu_attention") / "r.json"
    env = dict(os.environ, OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="",
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    proc = subprocess.run([sys.executable, "bench/gpu_attention.py", "--tiny", "--device", "cpu",
                           "--repeats", "1", "--number", "1", "--warmup", "1", "--out", str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "| T | mask | scorer | backend |" in proc.stdout
    return json.loads(out.read_text())


def test_a_checked_timed_row_per_scorer_and_backend(report):
    bench = load_bench("gpu_attention")
    expected = {("scaled_dot", "torch"), *bench.plan(bench.SCORERS)}
    rows = {(r["scorer"], r["backend"], r["passes"]): r for r in report["rows"]}
    assert {k[:2] for k in rows} == expected
    for key, r in rows.items():
        assert r["ms"] > 0 and len(r["samples_ms"]) == 1, key
        assert r["check_ok"] is True, (key, r["check"])
    # the reference is its own denominator; every scorer has an explicit row to compare with
    assert rows[("scaled_dot", "torch", "fwd+bwd")]["ratio_sdpa"] == pytest.approx(1.0)
    assert {(s, "explicit", "fwd+bwd") for s in bench.SCORERS} <= set(rows)
    assert rows[("gat", "explicit", "fwd+bwd")]["speedup_vs_explicit"] == pytest.approx(1.0)


def test_flex_is_timed_forward_only_on_a_cpu_beside_forward_only_denominators(report):
    flex = [r for r in report["rows"] if r["backend"] == "flex"]
    assert flex and all(r["passes"] == "fwd" and "grad_x" not in r["check"] for r in flex)
    assert all(r["ratio_sdpa"] is not None and r["speedup_vs_explicit"] is not None for r in flex)
    assert any("no backward" in n for n in report["notes"])
    assert report["goals"] == []  # the goals are at T=2048, not run here
