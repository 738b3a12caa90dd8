"""scripts/bench/bench_memory.py: POPGym's MMER from progress.csv against a hand computation, the
interleaved plan, and a tiny end-to-end run that prints the table."""
from __future__ import annotations

import csv
import importlib.util
import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("popgym")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "bench", "bench_memory.py")


def _bench():
    spec = importlib.util.spec_from_file_location("bench_memory", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _write_progress(path, rows):
    path.mkdir(parents=True, exist_ok=True)
    with open(path / "progress.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, ["Diagnostics/CumSteps", "Diagnostics/TrainReturn",
                                    "ReturnAverage"])
        writer.writeheader()
        for steps, train, evaluation in rows:
            writer.writerow({"Diagnostics/CumSteps": steps, "Diagnostics/TrainReturn": train,
                             "ReturnAverage": evaluation})


def test_mmer_terms_and_rising_from_progress(tmp_path):
    bench = _bench()
    # no episode ended before the first row (empty training return), then a curve that peaks
    rising = [(0, "", -0.5), (10, -0.4, -0.45), (20, -0.1, -0.2), (30, 0.3, 0.2),
              (40, 0.5, 0.6), (50, 0.7, 0.8), (60, 0.8, 0.9), (70, 0.9, 0.95), (80, 0.95, "")]
    _write_progress(tmp_path / "a", rising)
    got = bench.summarize(*bench.read_curve(str(tmp_path / "a")))
    assert got["max_return"] == 0.95 and got["max_at"] == 80
    assert got["final_eval"] == 0.95  # the last row with an evaluation
    # last quarter (2 rows of 8 with a training return) 0.925 > the quarter before, 0.75
    assert got["rising"] is True
    flat = [(s, 0.5 + 0.001 * (i % 2), 0.5) for i, s in enumerate(range(0, 100, 10))]
    _write_progress(tmp_path / "b", flat)
    assert bench.summarize(*bench.read_curve(str(tmp_path / "b")))["rising"] is False
    _write_progress(tmp_path / "c", [(0, "", 0.0)])
    with pytest.raises(ValueError, match="no training return"):
        bench.summarize(*bench.read_curve(str(tmp_path / "c")))


def test_plan_interleaves_every_run_once():
    bench = _bench()
    order = bench.plan(["A", "B"], ["gru", "lstm", "attention"], [0, 1])
    assert sorted(order) == sorted((t, c, s) for t in "AB" for c in ["gru", "lstm", "attention"]
                                   for s in (0, 1))
    firsts = [order[i][1] for i in range(0, len(order), 3)]
    assert firsts == ["gru", "lstm", "attention", "gru"]  # the core order rotates each round


def test_tiny_run_prints_the_table_with_paper_figures(tmp_path):
    paper = tmp_path / "paper.json"
    paper.write_text(json.dumps({"RepeatPreviousEasy": {"gru": 0.5, "source": "Table X"}}))
    done = subprocess.run(
        [sys.executable, SCRIPT, "--tasks", "RepeatPreviousEasy", "--cores", "gru",
         "--seeds", "0", "--steps", "2048", "--out", str(tmp_path / "runs"), "--paper",
         str(paper)], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    line = next(x for x in done.stdout.splitlines() if x.startswith("| RepeatPreviousEasy"))
    assert "| gru |" in line and line.rstrip().endswith("| 0.50 | - |")
    assert "Table X" in done.stdout
    (result,) = json.loads((tmp_path / "runs" / "results.json").read_text())["results"]
    assert -1.0 <= result["max_return"] <= 1.0 and result["wall"] > 0
