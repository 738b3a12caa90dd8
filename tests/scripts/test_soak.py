"""Fast checks of scripts/soak.py's helpers: commands and pinning, progress.csv rates and
restarts, process-tree sampling, the victim of an injected restart and its schedule, stopping,
and the verdict. No training run is started."""
from __future__ import annotations

import math
import multiprocessing as mp
import os
import sys
import textwrap
import time
from pathlib import Path

import psutil
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
    assert cmd[cmd.index("--n-envs") + 1] == "4" and "--runner" not in cmd
    sets = [cmd[i + 1] for i, a in enumerate(cmd) if a == "--set"]
    assert "algo.replay_size=1234" in sets and sets[-1] == "algo.learning_rate=1e-4"
    assert not any("max_worker_restarts" in a for a in sets)
    ppo = soak.job_command("ppo", "/tmp/y", replay_size=1, affinity=None, python="python")
    assert ppo[4:6] == ["ppo", "CartPole-v1"] and "--affinity" not in ppo
    assert not any("replay" in a for a in ppo)


def test_default_jobs_are_the_issues_pair(soak):
    """PPO on pong with the cpu sampler and async DQN on pong, each with the preset's
    environments; restarts allowed only when asked, before the user's own --set."""
    assert soak.DEFAULT_JOBS.split(",") == ["ppo-pong", "dqn-async"]
    ppo = soak.job_command("ppo-pong", "/tmp/p", replay_size=1, affinity=None, python="python")
    assert ppo[4:8] == ["ppo", "atari:pong", "--sampler", "cpu"]
    assert "--runner" not in ppo and "--n-envs" not in ppo
    dqn = soak.job_command("dqn-async", "/tmp/d", replay_size=5000,
                           affinity="0slt_2cpu_0gpu_0hto_2cpr_1res_1ass",
                           extra_sets=["algo.batch_size=16"], max_worker_restarts=7,
                           python="python")
    assert dqn[4:8] == ["dqn", "atari:pong", "--sampler", "cpu"]
    assert dqn[dqn.index("--runner") + 1] == "async" and "--n-envs" not in dqn
    sets = [dqn[i + 1] for i, a in enumerate(dqn) if a == "--set"]
    assert sets[-2:] == ["sampler.max_worker_restarts=7", "algo.batch_size=16"]
    assert "algo.replay_size=5000" in sets


def test_job_presets_accept_the_overrides(soak):
    """Every --set key of the soak jobs, the restart budget included, exists in the rlfast
    preset (a typo would make the job exit at once with a configuration error)."""
    from rlfast.experiments.config import apply_overrides
    from rlfast.experiments.presets import get_preset
    for name, spec in soak.JOBS.items():
        sets = [s.format(replay=1000) for s in spec["sets"]] + ["sampler.max_worker_restarts=3"]
        config = apply_overrides(get_preset(spec["algo"], spec["env"]), sets)
        assert config["sampler"]["max_worker_restarts"] == 3, name


def test_restart_budget_and_kill_schedule(soak):
    assert soak.restarts_allowed(60, 10) == 8 and soak.restarts_allowed(3, 1) == 5
    assert soak.restarts_allowed(60, None) == 0
    # Kills at every multiple of the period, none in the last max(2 samples, 60 s).
    assert soak.kill_times(180, 60, 20) == [60, 120]
    assert soak.kill_times(3600, 600, 60) == [600, 1200, 1800, 2400, 3000]
    assert soak.kill_times(3600, 600, 600) == [600, 1200, 1800, 2400]
    assert soak.kill_times(100, 60, 20) == [] and soak.kill_times(3600, 0, 60) == []
    # One kill per sample: samples every 20 s catch each kill at its time...
    times = soak.kill_times(180, 60, 20)
    done, made = 0, []
    for t in range(0, 181, 20):
        if soak.kill_due(t, times, done):
            done += 1
            made.append(t)
    assert made == [60, 120]
    # ... and samples every 50 s make each late kill once, one per sample.
    times = [60, 120, 130]
    done, made = 0, []
    for t in range(0, 301, 50):
        if soak.kill_due(t, times, done):
            done += 1
            made.append(t)
    assert made == [100, 150, 200]


def test_deepest_leaves(soak):
    # A sync run: the master's children are the workers.
    assert soak.deepest_leaves({1: [12, 11]}, 1) == [11, 12]
    # An async run: master -> sampler process (and a copier) -> workers.
    tree = {1: [2, 3], 2: [21, 20], 3: []}
    assert soak.deepest_leaves(tree, 1) == [20, 21]
    assert soak.deepest_leaves(tree, 1, min_depth=2) == [20, 21]
    # Between a worker's death and its replacement the sampler process is the deepest:
    # never a victim where workers lie two levels down.
    assert soak.deepest_leaves({1: [2, 3]}, 1, min_depth=2) == []
    assert soak.deepest_leaves({1: [2, 3]}, 1) == [2, 3]
    assert soak.deepest_leaves({}, 1) == [] and soak.deepest_leaves({1: []}, 1) == []


def test_affinity_codes_give_each_job_its_own_cores(soak):
    from rlfast.launching import affinity_from_code
    a0 = affinity_from_code(soak.affinity_code(0, 2, 1))
    a1 = affinity_from_code(soak.affinity_code(1, 2, 1))
    assert a0["master_cpus"] == [0] and a0["workers_cpus"] == [[0]]
    assert a1["master_cpus"] == [1] and a1["workers_cpus"] == [[1]]
    a = affinity_from_code(soak.affinity_code(1, 8, 4))
    assert a["master_cpus"] == [4, 5, 6, 7] and len(a["workers_cpus"]) == 4


def test_job_affinity_codes_fit_async_jobs_on_two_cores(soak):
    """On 2 cores the async job's optimizer gets core 0 and its sampler core 1, which the
    sync job shares; every code is one rlfast accepts for the job's runner."""
    from rlfast.experiments.assembly import affinity_for_run
    from rlfast.utils.affinity import affinity_from_code
    codes = soak.job_affinity_codes(["sync", "async"], 2, 1)
    assert codes == ["1slt_2cpu_0gpu_0hto_1cpr", "0slt_2cpu_0gpu_0hto_2cpr_1res_1ass"]
    ppo, dqn = (affinity_from_code(c) for c in codes)
    assert ppo["master_cpus"] == [1] and ppo["workers_cpus"] == [[1]]
    assert dqn["optimizer"][0]["master_cpus"] == [0] and dqn["sampler"]["workers_cpus"] == [[1]]
    assert soak.job_affinity_codes(["sync", "sync"], 2, 1) == [
        "0slt_2cpu_0gpu_0hto_1cpr", "1slt_2cpu_0gpu_0hto_1cpr"]
    assert soak.job_affinity_codes(["async"], 2, 1) == ["0slt_2cpu_0gpu_0hto_2cpr_1res_1ass"]
    # Two cores per job: each its own, the async optimizer on the first of them.
    codes4 = soak.job_affinity_codes(["async", "sync"], 4, 2)
    assert codes4 == ["0slt_4cpu_0gpu_0hto_2cpr_1res_1ass", "1slt_4cpu_0gpu_0hto_2cpr"]
    a = affinity_from_code(codes4[0])
    assert a["optimizer"][0]["master_cpus"] == [0] and a["sampler"]["workers_cpus"] == [[1]]
    assert affinity_from_code(codes4[1])["workers_cpus"] == [[2], [3]]
    for runner, code in (("sync", codes[0]), ("async", codes[1])):
        assert affinity_for_run(code, runner) is not None
    for runners, n_cpu, per_job in ((["sync", "sync", "async"], 2, 1), (["async", "async"], 2, 1),
                                    (["sync", "async"], 2, 2), (["sync"], 3, 2),
                                    (["sync"], 2, -1), (["asink"], 2, 1)):
        with pytest.raises(ValueError):
            soak.job_affinity_codes(runners, n_cpu, per_job)


def test_progress_rates(soak, tmp_path):
    path = tmp_path / "progress.csv"
    assert soak.read_progress(path) == []
    path.write_text("Diagnostics/Iteration,Diagnostics/CumSteps,Diagnostics/CumTime (s),"
                    "Diagnostics/WorkerRestarts,ReturnAverage\n" + textwrap.dedent("""\
        -1,0,0.0,0,nan
        9,1000,10.0,0,1.0
        19,2000,20.0,1,2.0
        29,3000,25.0,1,3.0
        39,40"""))  # the last row is being written
    rows = soak.read_progress(path)
    assert rows == [(1000.0, 10.0, 0.0), (2000.0, 20.0, 1.0), (3000.0, 25.0, 1.0)]
    assert rows[-1].steps == 3000 and rows[-1].restarts == 1
    assert soak.window_rate(rows, 0) == pytest.approx(3000 / 25)
    assert soak.window_rate(rows, 1) == pytest.approx(2000 / 15)
    assert soak.window_rate(rows, 2) == pytest.approx(1000 / 5)
    assert math.isnan(soak.window_rate(rows, 3))
    # A run without the column (before issue 54): restarts unknown.
    path.write_text("CumSteps,CumTime (s)\n500,5.0\n")
    (row,) = soak.read_progress(path)
    assert row[:2] == (500.0, 5.0) and math.isnan(row.restarts)


def _sample(t, rss=100.0, workers=50.0, fds=40, shm=10, rate=1000.0, n=1, alive=1,
            restarts=0.0, kills=0, uss=20.0, pss=120.0):
    return dict(job="j", t_s=t, phase="", alive=alive, master_pid=1, n_workers=n,
                rss_master_mb=rss, rss_workers_mb=workers, uss_master_mb=40.0,
                uss_workers_mb=uss, pss_total_mb=pss, fds_master=fds, fds_workers=0,
                fds=fds, shm_job=shm, shm_global=0, cum_steps=t * 1000, progress_rows=0,
                steps_per_s=rate, worker_restarts=restarts, kills=kills, killed_pid="")


def _failed(checks):
    return sorted(name for name, ok, _ in checks if not ok)


def test_speed_check(soak):
    flat = [1000.0, 980.0, 1020.0, 990.0, 1010.0, 1000.0, 995.0, 1005.0]
    name, ok, detail = soak.speed_check(flat, 0.10)
    assert name == "steps/s" and ok and "first/last 2" in detail
    # A 15% fall of the last rates fails; the same fall with a 20% limit passes.
    falling = flat[:6] + [850.0, 850.0]
    assert not soak.speed_check(falling, 0.10)[1] and soak.speed_check(falling, 0.20)[1]
    # Just inside and just outside 10%, single rates (short runs: k = 1).
    assert soak.speed_check([1000.0, 901.0], 0.10)[1]
    assert not soak.speed_check([1000.0, 899.0], 0.10)[1]
    # One slow sample in the middle (a restart, a busy neighbour) is not a fall; a faster end
    # passes; NaN (no new row) is skipped; fewer than 2 rates cannot be judged.
    assert soak.speed_check(flat[:4] + [500.0] + flat[4:], 0.10)[1]
    assert soak.speed_check([1000.0, 1500.0], 0.10)[1]
    nan = float("nan")
    assert soak.speed_check([nan, 1000.0, nan, 950.0, nan], 0.10)[1]
    assert not soak.speed_check([nan, 1000.0, nan], 0.10)[1]
    # Up to 5 rates a side in long runs.
    long = [1000.0] * 30 + [880.0] * 5
    assert "first/last 5" in soak.speed_check(long, 0.10)[2]
    assert not soak.speed_check(long, 0.10)[1]


def test_restarts_check(soak):
    quiet = [_sample(t) for t in range(0, 300, 60)]
    assert soak.restarts_check(quiet)[1]
    killed = [_sample(0), _sample(60, kills=1), _sample(120, restarts=1.0, kills=2),
              _sample(180, restarts=2.0, kills=2)]
    assert soak.restarts_check(killed) == ("restarts", True, "WorkerRestarts 2, kills landed 2")
    assert not soak.restarts_check(killed[:3])[1]  # one restart not logged (yet)
    assert not soak.restarts_check(killed, kills_missed=1)[1]
    assert not soak.restarts_check([_sample(0, restarts=1.0)])[1]  # a restart nobody caused
    nan = float("nan")
    assert soak.restarts_check([_sample(0, restarts=nan)])[1]  # no column, no kill
    assert not soak.restarts_check([_sample(0, restarts=nan, kills=1)])[1]


def test_judge(soak):
    limits = soak.Limits(max_rss_growth=0.05, max_speed_fall=0.10)
    steady = [_sample(t, rate=1000 + (t % 3) * 50) for t in range(0, 600, 60)]
    assert _failed(soak.judge(steady, 100, limits)) == []
    # Growth during the warm-up does not count.
    warm = [_sample(0, rss=10, fds=3, shm=0, rate=float("nan"))] + steady[1:]
    assert _failed(soak.judge(warm, 30, limits)) == []
    leaky = [_sample(t, rss=100 + t / 10, fds=40 + t // 120, shm=10 + t // 300)
             for t in range(0, 600, 60)]
    assert _failed(soak.judge(leaky, 100, limits)) == ["RSS master", "open fds",
                                                       "shm segments"]
    slow = steady[:-2] + [_sample(480, rate=700.0), _sample(540, rate=700.0)]
    assert _failed(soak.judge(slow, 100, limits)) == ["steps/s"]
    gaps = [dict(s, steps_per_s=float("nan")) if i % 2 else s for i, s in enumerate(steady)]
    assert _failed(soak.judge(gaps, 100, limits)) == []  # samples without a new row are skipped
    respawn = steady[:-1] + [_sample(540, n=2)]
    assert _failed(soak.judge(respawn, 100, limits)) == ["workers"]
    assert _failed(soak.judge(steady[:2], 100, limits)) == ["samples"]
    assert "alive" in _failed(soak.judge(steady, 100, limits, ended_early=True))
    unlogged = steady[:-1] + [_sample(540, kills=1)]
    assert _failed(soak.judge(unlogged, 100, limits)) == ["restarts"]
    assert _failed(soak.judge(steady, 100, limits, kills_missed=1)) == ["restarts"]
    # A restart forks its replacement from the grown master: the workers' RSS steps up once
    # (shared copy-on-write pages), which a run with kills shows but does not judge; the
    # workers' own memory (USS) and the job's share (PSS) are judged, with or without kills.
    forked = [_sample(t, workers=50.0 if t < 300 else 70.0, kills=int(t >= 300),
                      restarts=float(t >= 360)) for t in range(0, 600, 60)]
    assert _failed(soak.judge(forked, 100, limits)) == []
    rss_workers = [c for c in soak.judge(forked, 100, limits) if c[0] == "RSS workers"][0]
    assert "copy-on-write" in rss_workers[2]
    unforked = [dict(s, kills=0, worker_restarts=0.0) for s in forked]
    assert _failed(soak.judge(unforked, 100, limits)) == ["RSS workers"]
    owned = [dict(s, uss_workers_mb=20.0 + s["t_s"] / 20) for s in forked]
    assert _failed(soak.judge(owned, 100, limits)) == ["USS workers"]
    shared = [dict(s, pss_total_mb=120.0 + s["t_s"] / 20) for s in forked]
    assert _failed(soak.judge(shared, 100, limits)) == ["PSS total"]
    older = [{k: v for k, v in s.items() if k not in ("uss_workers_mb", "pss_total_mb")}
             for s in steady]  # a CSV written before USS and PSS were recorded
    assert _failed(soak.judge(older, 100, limits)) == []
    assert soak.warmup_seconds(30 * 60) == 300 and soak.warmup_seconds(180) == 30
    assert soak.warmup_seconds(180, 2) == 120
    table = soak.format_table(warm, 30)
    assert len(table.splitlines()) == 2 + len(warm) and " w " in table.splitlines()[2]
    assert "restarts" in table.splitlines()[0] and "kills" in table.splitlines()[0]


def test_restart_lines(soak, tmp_path):
    out = ("itr 3\nSampler worker 0 restarted (1 of 5 allowed), iteration 7 collected again: "
           "killed by SIGKILL\nSampler workers restarted (2 of 5 allowed; the batch ...)\n"
           "other\n")
    assert soak.restart_lines(out) == [
        "Sampler worker 0 restarted (1 of 5 allowed), iteration 7 collected again: killed by "
        "SIGKILL", "Sampler workers restarted (2 of 5 allowed; the batch ...)"]
    # A job reads them from its debug.log (rlfast's console may leave them out), else from
    # its output.
    job = soak.Job("j", ["true"], str(tmp_path))
    (tmp_path / "output.txt").write_text("Sampler worker 1 restarted (1 of 2 allowed)\n")
    assert job.restart_lines() == ["Sampler worker 1 restarted (1 of 2 allowed)"]
    (tmp_path / "debug.log").write_text(out)
    assert len(job.restart_lines()) == 2


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
        assert 0 < s["uss_workers_mb"] < s["rss_workers_mb"] and s["pss_total_mb"] > 1
        assert s["steps_per_s"] != s["steps_per_s"]  # NaN: no progress.csv
        if os.path.isdir("/dev/shm"):
            assert s["shm_job"] >= 1  # the RawArray's (deleted) /dev/shm arena
        # A sync run's victim: the master's child with the lowest pid.
        children = psutil.Process(job.proc.pid).children()
        assert soak.choose_victim(job.proc.pid).pid == min(c.pid for c in children)
    finally:
        job.stop(grace_s=1.0, term_s=1.0)
    assert job.survivors() == []
    assert len(job.seen) == 3
    assert ("SIGKILL" in job.stop_note) == stubborn
    assert not job.ended_early
    job.stop()  # idempotent


# An async run's shape: the master's children are a sampler process, whose children are the
# workers, and a copier (a leaf one level up).
_ASYNC_TREE = """
import multiprocessing as mp, time
def leaf():
    time.sleep(600)
def sampler():
    ctx = mp.get_context("fork")
    for _ in range(2):
        ctx.Process(target=leaf, daemon=False).start()
    print("ready", flush=True)
    time.sleep(600)  # never reaps: a killed worker stays a zombie
if __name__ == "__main__":
    ctx = mp.get_context("fork")
    ctx.Process(target=sampler, daemon=False).start()
    ctx.Process(target=leaf, daemon=False).start()
    time.sleep(600)
"""


def test_kill_worker_picks_the_sampler_processes_children(soak, tmp_path):
    script = tmp_path / "async_tree.py"
    script.write_text(_ASYNC_TREE)
    job = soak.Job("async", [sys.executable, str(script)], str(tmp_path / "log"), worker_depth=2)
    job.start()
    try:
        deadline = time.monotonic() + 30
        while "ready" not in job.output_tail() and time.monotonic() < deadline:
            time.sleep(0.05)
        master = psutil.Process(job.proc.pid)
        workers = sorted(p.pid for p in master.children(recursive=True)
                         if p.ppid() != master.pid)
        assert len(workers) == 2
        # Before the first training row a due kill waits; none is due before its time.
        job.sample(1.0, "steady", 0)
        assert not job.training
        assert job.scheduled_kill(1.0, [1.0, 2.0], 600) == ", kill waits for the first training row"
        assert job.kills_tried == 0
        (tmp_path / "log" / "progress.csv").write_text("CumSteps,CumTime (s),WorkerRestarts\n"
                                                       "100,2.0,0\n")
        job.sample(1.0, "steady", 0)
        assert job.training
        assert job.scheduled_kill(0.5, [1.0, 2.0], 600) == ""
        assert job.scheduled_kill(1.0, [1.0, 2.0], 600) == f", KILLED worker {workers[0]}"
        assert soak._wait_gone([psutil.Process(workers[0])], 10.0) == []
        assert job.kills == [(1.0, workers[0])] and job.kills_tried == 1
        assert job.samples[-1]["kills"] == 1 and job.samples[-1]["killed_pid"] == workers[0]
        # The dead worker (a zombie) is never chosen again; then the other one goes.
        assert soak.choose_victim(master.pid, 2).pid == workers[1]
        assert job.scheduled_kill(2.0, [1.0, 2.0], 2.0) == ""  # the soak's end: no kill
        assert job.kill_worker(2.0) == workers[1]
        assert soak._wait_gone([psutil.Process(workers[1])], 10.0) == []
        # No worker left: the sampler process and the copier are never victims.
        assert job.kill_worker(3.0) is None
        assert job.kills_missed == [(3.0, "found no sampler worker to kill")]
        assert all(p.is_running() for p in master.children())
        s = job.sample(4.0, "steady", 0)
        assert s["kills"] == 2 and s["alive"] == 1
    finally:
        job.stop(grace_s=1.0, term_s=1.0)
    assert job.survivors() == []


def test_shm_segments_sees_a_rawarray(soak):
    if not os.path.isdir("/dev/shm"):
        pytest.skip("no /dev/shm")
    before = soak.shm_segments(os.getpid())
    keep = mp.get_context("fork").RawArray("b", 1 << 22)
    after = soak.shm_segments(os.getpid())
    assert len(after) >= len(before) and all(p.startswith(("/dev/shm/", "/memfd:")) for p in after)
    assert after, "a RawArray is backed by a /dev/shm file"
    del keep


def test_bad_arguments(soak, capsys):
    assert soak.main(["--jobs", "ppo,nope"]) == 2
    assert "--jobs" in capsys.readouterr().err
    assert soak.main(["--kill-worker-every", "0"]) == 2
    assert "--kill-worker-every" in capsys.readouterr().err
