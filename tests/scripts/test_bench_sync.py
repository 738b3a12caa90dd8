"""Smoke test of scripts/bench/bench_sync.py: ``--quick`` runs every contender (MinibatchRl on one
and on every core, SyncRl with 1 and 2 ranks) for a few seconds each on ``atari:pong`` and
prints the machine, the table and the ratios with finite positive figures."""
from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench" / "bench_sync.py"


def _number(cell: str) -> float:
    return float(re.match(r"[\d,.]+", cell.strip()).group(0).replace(",", ""))


def test_quick_run_prints_machine_table_and_ratios(tmp_path):
    pytest.importorskip("ale_py")
    out_json = tmp_path / "out.json"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--json", str(out_json)],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("Machine: ") and "torch" in lines[0]
    rows = [line for line in lines if line.startswith("| ") and not line.startswith("| contender")]
    names = [r.split("|")[1].strip() for r in rows]
    assert names == ["MinibatchRl (1 process)", "MinibatchRl, updates on every core",
                     "SyncRl x1", "SyncRl x2"], names
    envs = {}
    for row, name in zip(rows, names):
        cells = row.strip("|").split("|")[1:]
        envs[name] = int(_number(cells[0]))
        for cell in cells[1:]:
            value = _number(cell)
            assert math.isfinite(value) and value > 0, row
    assert rows[0].rstrip(" |").endswith("1.00x")  # the baseline divides by itself
    assert envs["SyncRl x2"] == 2 * envs["SyncRl x1"] == 2 * envs["MinibatchRl (1 process)"]
    data = json.loads(out_json.read_text())
    assert set(data["medians"]) == set(names) and data["machine"] == lines[0][len("Machine: "):]
