"""Smoke test of scripts/bench/bench_es.py: ``--quick`` runs both contenders (rlfast's ES workers
and a ProcessPoolExecutor loop) with 1 and 2 workers on the same candidates, checks they agree
on every episode return (the script exits non-zero otherwise) and prints the machine and a
table of finite positive rates and ratios."""
from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench" / "bench_es.py"


def test_quick_run_prints_machine_and_table(tmp_path):
    proc = subprocess.run([sys.executable, str(SCRIPT), "--quick"], capture_output=True,
                          text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("Machine: ") and "torch" in lines[0]
    rows = [line for line in lines if line.startswith("| ") and line[2].isdigit()]
    assert [row.split("|")[1].strip() for row in rows] == ["1", "2"], proc.stdout
    for row in rows:
        rlfast, pool, ratio = (float(c.strip().rstrip("x")) for c in row.strip("|").split("|")[1:])
        assert all(math.isfinite(v) and v > 0 for v in (rlfast, pool, ratio)), row
        assert abs(ratio - rlfast / pool) < 0.02 * ratio + 0.01, row
