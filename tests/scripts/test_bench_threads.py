"""scripts/bench/bench_threads.py: the steps/s it reads off a progress file (against a hand
computation), the busy processes it starts and stops, and one short idle run end to end."""
from __future__ import annotations

import json
import time

import psutil
import pytest

from tests.scripts._script_module import script_module


@pytest.fixture(scope="module")
def bench():
    with script_module("bench/bench_threads.py", "bench_threads") as module:
        yield module


def _write_progress(path, rows):
    with open(path, "w") as f:
        f.write("Diagnostics/CumSteps,Diagnostics/CumTime (s),ReturnAverage\n")
        for steps, seconds in rows:
            f.write(f"{steps},{seconds},0.0\n")


def test_learning_rate_counts_from_the_first_row_after_learning_starts(bench, tmp_path):
    progress = tmp_path / "progress.csv"
    _write_progress(progress, [(0, 0.0), (250, 0.5), (500, 1.0), (1500, 3.0), (2500, 5.5)])
    # by hand: from (500, 1.0) to (2500, 5.5): 2000 steps in 4.5 s
    assert bench.learning_rate_of(str(progress), 500) == pytest.approx(2000 / 4.5)
    assert bench.learning_rate_of(str(progress), 501) == pytest.approx(1000 / 2.5)
    with pytest.raises(RuntimeError, match="fewer than two progress rows after step 2000"):
        bench.learning_rate_of(str(progress), 2000)


def test_busy_processes_burn_a_core_and_stop(bench):
    procs = bench.busy_processes(1)
    try:
        ps = psutil.Process(procs[0].pid)
        ps.cpu_percent(None)
        time.sleep(0.5)
        assert ps.cpu_percent(None) > 30.0
    finally:
        for proc in procs:
            bench.stop_group(proc, grace=1.0)
    assert all(proc.poll() is not None for proc in procs)


def test_one_idle_round_prints_the_table_and_writes_json(bench, tmp_path, capsys):
    out = tmp_path / "threads.json"
    assert bench.main(["--algos", "dqn", "--rounds", "1", "--steps", "700", "--interval", "100",
                       "--quick", "--policies", "PASSIVE", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "dqn       idle    PASSIVE" in printed and "code/none" in printed
    record = json.loads(out.read_text())
    assert set(record["medians"]) == {"dqn none PASSIVE idle", "dqn code PASSIVE idle"}
    assert all(v > 0 for v in record["medians"].values())
