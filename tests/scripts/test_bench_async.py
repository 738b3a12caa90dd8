"""Smoke test of scripts/bench/bench_async.py: ``--quick`` runs every contender (DQN on Pong sync
and async, the copier comparison, SAC on Pendulum) for a fraction of a second each, in well
under a minute, and prints the machine, the table and the ratios with finite positive figures."""
from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench" / "bench_async.py"


def _number(cell: str) -> float:
    return float(re.match(r"[\d,.]+", cell.strip()).group(0).replace(",", ""))


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    pytest.importorskip("ale_py")
    out_json = tmp_path_factory.mktemp("bench_async") / "out.json"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--json", str(out_json)],
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout, json.loads(out_json.read_text())


def test_quick_prints_machine_table_and_ratios(quick):
    stdout, _ = quick
    assert stdout.startswith("Machine: ") and "torch" in stdout.splitlines()[0]
    rows = [line for line in stdout.splitlines() if line.startswith("| ") and " | " in line]
    runs = [r for r in rows if not r.startswith(("| run ", "| comparison "))
            and "x (" not in r]
    names = [r.split("|")[1].strip() for r in runs]
    assert any("sync serial" in n for n in names) and any("sync cpu" in n for n in names)
    assert any(n.startswith("dqn") and "throttled" in n for n in names)
    assert any("copier=process" in n for n in names) and any("copier=optimizer" in n for n in names)
    assert any(n.startswith("sac") and "sync" in n for n in names)
    assert any(n.startswith("sac") and "async" in n for n in names)
    for row in runs:
        cells = row.strip("|").split("|")[1:]
        # env steps/s, updates/s, achieved replay ratio (target), CPU of the master: > 0;
        # optim busy, CPU of the children (none for a serial sync run) and of others: >= 0.
        for i, cell in enumerate(cells[:7]):
            value = _number(cell)
            assert math.isfinite(value) and (value > 0 if i in (0, 1, 2, 4) else value >= 0), row
    ratios = [r for r in rows if "x (" in r]
    assert len(ratios) == 3  # DQN async / sync, SAC async / sync, copier process / optimizer
    for row in ratios:
        for cell in row.strip("|").split("|")[1:]:
            paired, of_medians = re.findall(r"([\d.]+)x", cell)
            assert float(paired) > 0 and float(of_medians) > 0, row
    assert "Target async env steps/s >= 1.3x the best sync" in stdout


def test_quick_json_figures_are_finite_and_positive(quick):
    _, data = quick
    assert data["machine"] and data["specs"]
    for spec in data["specs"]:
        runs = data["runs"][spec["name"]]
        assert len(runs) == 1
        for key in ("env_sps", "ups", "ratio", "window_s", "cpu_master"):
            assert math.isfinite(runs[0][key]) and runs[0][key] > 0, (spec["name"], key)
        if spec["runner"] == "async":
            assert runs[0]["affinity_code"].endswith("1ass")
            assert runs[0]["cpu_children"] > 0  # the sampler process worked
        else:  # MinibatchRl makes whole updates per iteration: exactly the target ratio
            assert runs[0]["ratio"] == pytest.approx(spec["replay_ratio"])
    for comparison in data["summary"]["comparisons"]:
        for key in ("env_sps_paired", "ups_paired", "env_sps", "ups"):
            assert math.isfinite(comparison[key]) and comparison[key] > 0


def test_batch_T_gives_whole_updates_per_iteration():
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import bench_async
    finally:
        sys.path.remove(str(SCRIPT.parent))
    assert bench_async.whole_batch_T("dqn", 8, None) == (2, 16)  # the preset's sampler
    assert bench_async.whole_batch_T("dqn", 0.5, None) == (4, 16)  # 64 steps: 1 update
    assert bench_async.whole_batch_T("dqn", 0.25, 4) == (32, 4)
    assert bench_async.whole_batch_T("sac", 256, None) == (1, 1)
