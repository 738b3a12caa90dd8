"""Fast checks of scripts/soak.py's helpers: commands, progress.csv rates, process-tree sampling,
stopping, and the verdict. No training run is started."""
from __future__ import annotations

import math
import multiprocessing as mp
import os
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.scripts._script_module import script_module

SOAK_PATH = Path(__file__).resolve().parents[2] / "scripts" / "soak.py"


@pytest.fixture(scope="module")
def soak():
    with script_module("soak.py", "rlfast_soak_script") as module:
        yield module


def test_job_commands(soak):
    cmd = soak.job_command("dqn", "/tmp/x", replay_size=1234, affinity="1slt_2cpu_0gpu_0hto_1cpr",
                           extra_sets=["algo.learning_rate=1e-4"], python="python")
    assert cmd[:6] == ["python", "-m", "rlfast.cli", "train", "dqn", "atari:pong"]
    assert cmd[cmd.index("--sampler") + 1] == "cpu"
    assert cmd[cmd.index("--log-dir") + 1] == "/tmp/x"
    assert cmd[cmd.index("--affinity") + 1] == "1slt_2cpu_0gpu_0hto_1cpr"
    sets = [cmd[i + 1] for i, a in enumerate(cmd) if a == "--set"]
    assert "algo.replay_size=1234" in sets and sets[-1] == "algo.learning_rate=1e-4"
    ppo = soak.job_command("ppo", "/tmp/y", replay_size=1, affinity=None, python="python")
    assert ppo[4:6] == ["ppo", "CartPole-v1"] and "--affinity" not in ppo
    assert not any("replay" in a for a in ppo)


def test_job_presets_accept_the_overrides(soak):
    """Every --set key of the soak jobs exists in the rlfast preset (a typo would make the
    job exit at once with a configuration error)."""
    from rlfast.experiments.config import apply_overrides
    from rlfast.experiments.presets import PRESETS
    for name, spec in soak.JOBS.items():
        kind = "atari" if spec["env"].startswith("atari:") else "discrete"
        apply_overrides(PRESETS[spec["algo"]][kind], [s.format(replay=1000) for s in spec["sets"]])


def test_affinity_codes_give_each_job_its_own_cores(soak):
    from rlfast.launching import affinity_from_code
    a0 = affinity_from_code(soak.affinity_code(0, 2, 1))
    a1 = affinity_from_code(soak.affinity_code(1, 2, 1))
    assert a0["master_cpus"] == [0] and a0["workers_cpus"] == [[0]]
    assert a1["master_cpus"] == [1] and a1["workers_cpus"] == [[1]]
    a = affinity_from_code(soak.affinity_code(1, 8, 4))
    assert a["master_cpus"] == [4, 5, 6, 7] and len(a["workers_cpus"]) == 4


def test_progress_rates(soak, tmp_path):
    path = tmp_path / "progress.csv"
    assert soak.read_progress(path) == []
    path.write_text(textwrap.dedent("""\
        Diagnostics/Iteration,Diagnostics/CumSteps,Diagnostics/CumTime (s),ReturnAverage
        -1,0,0.0,nan
        9,1000,10.0,1.0
        19,2000,20.0,2.0
        29,3000,25.0,3.0
        39,40"""))  # the last row is being written
    rows = soak.read_progress(path)
    assert rows == [(1000.0, 10.0), (2000.0, 20.0), (3000.0, 25.0)]
    assert soak.window_rate(rows, 0) == pytest.approx(3000 / 25)
    assert soak.window_rate(rows, 1) == pytest.approx(2000 / 15)
    assert soak.window_rate(rows, 2) == pytest.approx(1000 / 5)
    assert math.isnan(soak.window_rate(rows, 3))


def _sample(t, rss=100.0, workers=50.0, fds=40, shm=10, rate=1000.0, n=1, alive=1):
    return dict(job="j", t_s=t, phase="", alive=alive, master_pid=1, n_workers=n,
                rss_master_mb=rss, rss_workers_mb=workers, fds_master=fds, fds_workers=0,
                fds=fds, shm_job=shm, shm_global=0, cum_steps=t * 1000, progress_rows=0,
                steps_per_s=rate)


def _failed(checks):
    return sorted(name for name, ok, _ in checks if not ok)


def test_judge(soak):
    limits = soak.Limits(max_rss_growth=0.05, speed_tol=0.30)
    steady = [_sample(t, rate=1000 + (t % 3) * 50) for t in range(0, 600, 60)]
    assert _failed(soak.judge(steady, 100, limits)) == []
    # Growth during the warm-up does not count.
    warm = [_sample(0, rss=10, fds=3, shm=0, rate=float("nan"))] + steady[1:]
    assert _failed(soak.judge(warm, 30, limits)) == []
    leaky = [_sample(t, rss=100 + t / 10, fds=40 + t // 120, shm=10 + t // 300)
             for t in range(0, 600, 60)]
    assert _failed(soak.judge(leaky, 100, limits)) == ["RSS master", "open fds",
                                                       "shm segments"]
    slow = steady[:-1] + [_sample(540, rate=500.0)]
    assert _failed(soak.judge(slow, 100, limits)) == ["steps/s"]
    gaps = [dict(s, steps_per_s=float("nan")) if i % 2 else s for i, s in enumerate(steady)]
    assert _failed(soak.judge(gaps, 100, limits)) == []  # samples without a new row are skipped
    respawn = steady[:-1] + [_sample(540, n=2)]
    assert _failed(soak.judge(respawn, 100, limits)) == ["workers"]
    assert _failed(soak.judge(steady[:2], 100, limits)) == ["samples"]
    assert "alive" in _failed(soak.judge(steady, 100, limits, ended_early=True))
    assert soak.warmup_seconds(30 * 60) == 300 and soak.warmup_seconds(180) == 30
    assert soak.warmup_seconds(180, 2) == 120
    table = soak.format_table(warm, 30)
    assert len(table.splitlines()) == 2 + len(warm) and " w " in table.splitlines()[2]


_TREE = """
import multiprocessing as mp, signal, sys, time
def child(ignore):
    if ignore:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    time.sleep(600)
if __name__ == "__main__":
    ignore = sys.argv[1] == "1"
    if ignore:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    ctx = mp.get_context("fork")
    buf = ctx.RawArray("b", 1 << 20)
    procs = [ctx.Process(target=child, args=(ignore,), daemon=False) for _ in range(2)]
    for p in procs:
        p.start()
    print("ready", flush=True)
    time.sleep(600)
"""


@pytest.mark.parametrize("stubborn", [False, True], ids=["clean", "ignores-signals"])
def test_job_sample_and_stop_leave_no_process(soak, tmp_path, stubborn):
    script = tmp_path / "tree.py"
    script.write_text(_TREE)
    job = soak.Job("tree", [sys.executable, str(script), "1" if stubborn else "0"],
                   str(tmp_path / "log"))
    job.start()
    try:
        deadline = time.monotonic() + 30
        while "ready" not in job.output_tail() and time.monotonic() < deadline:
            time.sleep(0.05)
        s = job.sample(1.0, "steady", soak.global_shm_count())
        assert s["alive"] == 1 and s["n_workers"] == 2
        assert s["rss_master_mb"] > 1 and s["rss_workers_mb"] > 1 and s["fds"] > 0
        assert s["steps_per_s"] != s["steps_per_s"]  # NaN: no progress.csv
        if os.path.isdir("/dev/shm"):
            assert s["shm_job"] >= 1  # the RawArray's (deleted) /dev/shm arena
    finally:
        job.stop(grace_s=1.0, term_s=1.0)
    assert job.survivors() == []
    assert len(job.seen) == 3
    assert ("SIGKILL" in job.stop_note) == stubborn
    assert not job.ended_early
    job.stop()  # idempotent


def test_shm_segments_sees_a_rawarray(soak):
    if not os.path.isdir("/dev/shm"):
        pytest.skip("no /dev/shm")
    before = soak.shm_segments(os.getpid())
    keep = mp.get_context("fork").RawArray("b", 1 << 22)
    after = soak.shm_segments(os.getpid())
    assert len(after) >= len(before) and all(p.startswith(("/dev/shm/", "/memfd:")) for p in after)
    assert after, "a RawArray is backed by a /dev/shm file"
    del keep


def test_bad_jobs_argument(soak, capsys):
    assert soak.main(["--jobs", "ppo,nope"]) == 2
    assert "--jobs" in capsys.readouterr().err
