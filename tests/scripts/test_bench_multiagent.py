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


def test_mappo_options_bench_passes_each_variants_settings_to_its_run(tmp_path):
    out = tmp_path / "results.json"
    done = subprocess.run(
        [sys.executable, os.path.join(ROOT, "scripts", "bench", "bench_mappo_options.py"),
         "--variants", "both", "--steps", "3200", "--seeds", "3", "--n-agents", "2",
         "--eval-episodes", "8", "--sampler", "serial", "--out", str(tmp_path / "runs"),
         "--json", str(out)],
        capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "| both | algo.value_norm=True algo.value_loss=huber | " in done.stdout
    (run,) = json.loads(out.read_text())["results"]["both"]
    assert run["seed"] == 3 and run["steps"] == 3200 and -100 < run["final_return"] < 0
    params = json.loads((tmp_path / "runs" / "both_seed3" / "params.json").read_text())
    algo = params["config"]["algo"] if "config" in params else params["algo"]
    assert algo["value_norm"] is True and algo["value_loss"] == "huber"


def test_mappo_options_table_compares_each_variant_with_the_preset():
    sys.path.insert(0, os.path.join(ROOT, "scripts", "bench"))
    try:
        from bench_mappo_options import table
    finally:
        sys.path.pop(0)
    runs = {"none": [dict(final_return=-20.0, wall_s=10.0), dict(final_return=-22.0,
                                                                 wall_s=12.0)],
            "value_norm": [dict(final_return=-19.0, wall_s=11.0), dict(final_return=-20.0,
                                                                       wall_s=11.0)]}
    lines = table(runs).splitlines()
    assert "| vs none |" in lines[0]
    assert lines[2].split("|")[1:-1] == [" none ", " algo.value_norm=False algo.value_loss=mse ",
                                         " -20.00 / -22.00 ", " -21.00 ", "  ", " 11.0 "]
    assert lines[3].split("|")[1:-1] == [" value_norm ",
                                         " algo.value_norm=True algo.value_loss=mse ",
                                         " -19.00 / -20.00 ", " -19.50 ", " +1.50 ", " 11.0 "]
