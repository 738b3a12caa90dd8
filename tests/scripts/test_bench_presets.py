"""Smoke test of scripts/bench/bench_presets.py: ``--quick --out DIR`` trains rlfast's default PPO
preset and SB3's zoo PPO on CartPole-v1 for a few thousand steps (one seed), and prints and
writes the machine line and the table. The statistics, the difference in SB3 standard
deviations, the time ratio and the verdict are recomputed here from the runs in the JSON."""
from __future__ import annotations

import json
import math
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench" / "bench_presets.py"
HEADER = ["env", "algo", "budget", "rlfast return", "SB3 return", "diff (SB3 std)",
          "rlfast time (s)", "SB3 time (s)", "time ratio", "verdict", "commit"]


def _table_rows(text: str) -> list[list[str]]:
    rows = [[c.strip() for c in line.strip().strip("|").split("|")]
            for line in text.splitlines() if line.startswith("| ")]
    assert rows and rows[0] == HEADER, rows[:1]
    return rows[1:]


def _stats(values: list[float]) -> tuple[float, float]:
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def test_quick_run_writes_table_and_consistent_json(tmp_path):
    pytest.importorskip("stable_baselines3")
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--out", str(out)],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("Machine: ") and "torch" in lines[0], lines[:1]
    assert "stable-baselines3" in lines[0]

    data = json.loads((out / "bench_presets.json").read_text())
    assert data["machine"] == lines[0][len("Machine: "):]
    assert data["seeds"] == [0] and data["eval_episodes"] == 10
    [record] = data["rows"]
    assert (record["env"], record["algo"]) == ("CartPole-v1", "ppo")
    assert record["errors"] == [], record["errors"]

    stats = {}
    for name in ("rlfast", "sb3"):
        [run] = record[name]["runs"]
        assert run["ok"] and run["seed"] == 0
        assert len(run["episode_returns"]) == 10
        # CartPole gives +1 per step, at most 500 steps per episode.
        assert all(1 <= r <= 500 for r in run["episode_returns"])
        assert run["final_return"] == pytest.approx(statistics.fmean(run["episode_returns"]))
        assert run["steps"] >= record["budget"]
        assert math.isfinite(run["train_time_s"]) and run["train_time_s"] > 0
        mean, std = _stats([run["final_return"]])
        assert record[name]["return_mean"] == pytest.approx(mean)
        assert record[name]["return_std"] == pytest.approx(std)
        assert record[name]["time_mean_s"] == pytest.approx(run["train_time_s"])
        stats[name] = (mean, std, run["train_time_s"])

    (rl_mean, _, rl_time), (sb_mean, sb_std, sb_time) = stats["rlfast"], stats["sb3"]
    ratio = rl_time / sb_time
    assert record["time_ratio"] == pytest.approx(ratio)
    if sb_std > 0:
        assert record["diff_sb3_std"] == pytest.approx((rl_mean - sb_mean) / sb_std)
    else:  # one seed: no spread to measure the difference in
        assert record["diff_sb3_std"] is None
    passed = rl_mean >= sb_mean - sb_std and rl_time < sb_time
    assert record["verdict"] == ("PASS" if passed else "FAIL")

    for text in (proc.stdout, (out / "bench_presets.md").read_text()):
        [row] = _table_rows(text)
        assert row[:3] == ["CartPole-v1", "ppo", f"{record['budget']:,}"]
        assert row[3] == f"{rl_mean:.1f} ± 0.0" and row[4] == f"{sb_mean:.1f} ± 0.0"
        assert float(row[6]) == pytest.approx(rl_time, abs=0.051)
        assert float(row[7]) == pytest.approx(sb_time, abs=0.051)
        assert float(row[8].rstrip("x")) == pytest.approx(ratio, abs=0.0051)
        assert row[9].split()[0] == record["verdict"]


def _bench_presets_module():
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import bench_presets
    finally:
        sys.path.remove(str(SCRIPT.parent))
    return bench_presets


def _record(env: str, algo: str, commit: str) -> dict:
    stats = dict(runs=[dict(seed=0, ok=True, load_before=0.5)], return_mean=1.0,
                 return_std=0.0, time_mean_s=1.0)
    return dict(env=env, algo=algo, budget=10, commit=commit, rlfast=dict(stats),
                sb3=dict(stats), diff_sb3_std=None, time_ratio=1.0, return_ok=True,
                time_ok=False, errors=[], verdict="FAIL")


def test_pieces_merge_into_one_table_in_suite_order(tmp_path):
    """The suite can be run in pieces into one --out DIR: earlier rows stay, a row run again
    replaces its record, rows come out in suite order, the rest are listed as not measured,
    and a file measured with other seeds is refused."""
    bp = _bench_presets_module()
    first, second = bp.ROWS[3], bp.ROWS[0]  # out of suite order on purpose
    old = [_record(first.env, first.algo, "aaa"), _record(second.env, second.algo, "aaa")]
    header = dict(machine="m", seeds=[0, 1], criterion="c")
    bp.write_outputs(str(tmp_path), header, old)
    previous = bp.load_previous(str(tmp_path), [0, 1])
    assert previous == old
    merged = bp.merge_records(previous, [_record(first.env, first.algo, "bbb")])
    assert [(r["env"], r["algo"], r["commit"]) for r in merged] == [
        (second.env, second.algo, "aaa"), (first.env, first.algo, "bbb")]
    table = bp.render_table(merged)
    rows = _table_rows(table)
    assert [(r[0], r[1], r[-1]) for r in rows] == [(second.env, second.algo, "aaa"),
                                                   (first.env, first.algo, "bbb")]
    missing = [f"{row.env}:{row.algo}" for row in bp.ROWS[1:] if row != first]
    assert f"Not measured yet ({len(bp.ROWS) - 2} of {len(bp.ROWS)} rows): " \
        + ", ".join(missing) + "." in table
    with pytest.raises(SystemExit, match=r"seeds \[0, 1\], this run uses \[0\]"):
        bp.load_previous(str(tmp_path), [0])
    assert bp.load_previous(str(tmp_path / "empty"), [0]) == []
    assert bp.commit() != ""


def test_cpu_slots_split_this_process_cpus_and_refuse_too_many():
    bp = _bench_presets_module()
    import os
    cpus = sorted(os.sched_getaffinity(0))
    assert bp.cpu_slots(1, 1) == [cpus[:1]]
    assert bp.cpu_slots(len(cpus), 1) == [[c] for c in cpus]
    with pytest.raises(SystemExit, match=rf"need {len(cpus) + 1} CPUs; this process may use "
                                         rf"{len(cpus)}"):
        bp.cpu_slots(len(cpus) + 1, 1)
    with pytest.raises(SystemExit, match="must be >= 1"):
        bp.cpu_slots(0, 1)


def test_child_runs_on_its_slot_cpus_with_as_many_threads():
    bp = _bench_presets_module()
    import os
    cpu = sorted(os.sched_getaffinity(0))[-1]
    ok, out, _ = bp._call([sys.executable, "-c", "import os; print(sorted(os.sched_getaffinity(0)),"
                           " os.environ['OMP_NUM_THREADS'], os.environ['SB3_LOGDIR'])"], 60, [cpu],
                          dict(SB3_LOGDIR="/some/dir"))
    assert ok and out.split() == [f"[{cpu}]", "1", "/some/dir"]


def test_slots_run_each_pair_once_never_two_on_one_slot(monkeypatch):
    """With slots, every (row, seed) pair runs exactly once, no two pairs share a slot at the
    same time, the slots do run side by side, and each row is summarized once, when its last
    seed is done, with its runs in seed order."""
    import threading
    import time
    bp = _bench_presets_module()
    rows, seeds = bp.ROWS[:3], [0, 1, 2]
    slots = [[10], [11], [12, 13]]
    lock, busy, ran, peak = threading.Lock(), set(), [], [0]

    def fake_pair(row, budget, seed, timeout, cpus):
        with lock:
            assert tuple(cpus) not in busy
            busy.add(tuple(cpus))
            peak[0] = max(peak[0], len(busy))
            ran.append((row.env, row.algo, seed))
        time.sleep(0.05)
        with lock:
            busy.remove(tuple(cpus))
        run = dict(seed=seed, ok=True, load_before=0.0, final_return=float(seed),
                   train_time_s=1.0 + seed, cpus=cpus)
        return dict(rlfast=dict(run), sb3=dict(run, train_time_s=2.0 + seed))

    monkeypatch.setattr(bp, "_run_pair", fake_pair)
    done = []
    bp.measure(rows, seeds, 100, 60.0, slots, done.append)
    assert sorted(ran) == sorted((r.env, r.algo, s) for r in rows for s in seeds)
    assert peak[0] == len(slots)
    assert sorted((d["env"], d["algo"]) for d in done) == sorted((r.env, r.algo) for r in rows)
    for record in done:
        assert [run["seed"] for run in record["rlfast"]["runs"]] == seeds
        assert record["rlfast"]["time_mean_s"] == pytest.approx(2.0)
        assert record["time_ratio"] == pytest.approx(2.0 / 3.0)


@pytest.mark.parametrize("slots", [False, True], ids=["one-pair-at-a-time", "slots"])
def test_sigterm_ends_the_children_and_leaves_nothing(tmp_path, slots):
    """SIGTERM to the suite while a child trains: the child ends, the suite exits 143, its
    temporary run folders are gone and no half-measured row is written."""
    psutil = pytest.importorskip("psutil")
    tmp, out = tmp_path / "tmp", tmp_path / "out"
    tmp.mkdir()
    cmd = [sys.executable, str(SCRIPT), "--quick", "--out", str(out)]
    if slots:
        cmd += ["--slots", "1", "--cores-per-slot", "1"]
    env = dict(os.environ, TMPDIR=str(tmp))
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            cwd=tmp_path, env=env)
    try:
        children = []
        deadline = time.monotonic() + 120
        while not children and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.1)
            try:
                children = [c for c in psutil.Process(proc.pid).children(recursive=True)
                            if "train" in c.cmdline()]
            except psutil.Error:
                pass
        assert children, "no training child appeared"
        assert any(p.name.startswith("bench_presets_") for p in tmp.iterdir())
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
        _, alive = psutil.wait_procs(children, timeout=10)  # before the clean-up below
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for child in children:  # a failing run must not leave its children behind
            try:
                child.kill()
            except psutil.Error:
                pass
    assert proc.returncode == 128 + signal.SIGTERM, err[-3000:]
    assert alive == [], alive
    assert [p.name for p in tmp.iterdir() if p.name.startswith("bench_presets_")] == []
    assert not (out / "bench_presets.json").exists()
