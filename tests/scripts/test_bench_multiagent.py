"""scripts/bench/bench_multiagent.py runs its rlfast side and prints the table (the BenchMARL side
needs the ``bench`` extra and minutes per run: not run here)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("mpe2")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_rlfast_side_of_the_multiagent_bench(tmp_path):
    out = tmp_path / "results.json"
    done = subprocess.run(
        [sys.executable, os.path.join(ROOT, "scripts", "bench", "bench_multiagent.py"), "--no-peer",
         "--steps", "3200", "--seeds", "0", "--n-agents", "2", "--eval-episodes", "8",
         "--sampler", "serial", "--out", str(tmp_path / "runs"), "--json", str(out)],
        capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "| rlfast | 0 |" in done.stdout
    (run,) = json.loads(out.read_text())["results"]["rlfast"]
    assert run["steps"] == 3200 and run["episodes"] == 8 and run["wall_s"] > 0
    assert -100 < run["final_return"] < 0
