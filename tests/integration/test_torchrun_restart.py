"""A two-rank ``rlfast train`` under torchrun's elastic agent (``--max-restarts 1``, gloo on
the CPU) one of whose ranks SIGKILLs itself in iteration 4 of the first start (rank 1, or
rank 0, which writes the logs and snapshots): torchrun restarts both ranks, which find the
run's newest snapshot (iteration 3, one is saved every iteration) in ``--log-dir`` and
continue from it to the end, with no row logged twice and no process or ``/dev/shm`` entry
left behind.

torchrun runs as ``sys.executable -m torch.distributed.run`` in its own session from
``tmp_path``, so the test behaves the same from any shell, directory or job control state;
its ranks (each in a session of its own) are tracked as its descendants.
"""
import csv
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests._leaks import new_shm_entries, shm_entries
from tests.integration._guards import live_children
from tests.integration._rank_kill_env import ENV_ID

ROOT = Path(__file__).resolve().parents[2]
ENV = f"tests.integration._rank_kill_env:{ENV_ID}"
BATCH_T, N_ENVS, WORLD = 32, 2, 2
ITR_STEPS = BATCH_T * N_ENVS * WORLD  # 128 environment steps per iteration, both ranks
N_ITR = 10
KILL_ITR = 4  # the rank dies sampling iteration 4; iteration 3's snapshot is the newest
RUN_TIMEOUT_S = 240  # torch imported by the agent and twice by each rank, on 2 busy cores
STEPS_KEY, ITR_KEY = "Diagnostics/CumSteps", "Diagnostics/Iteration"


def _env(tmp_path, log_dir, marker, killed_rank):
    """The run's environment: this checkout first on the path, no launcher variables of an
    enclosing torchrun or srun, the kill armed for ``killed_rank``'s first start."""
    env = {k: v for k, v in os.environ.items()
           if not (k.startswith(("SLURM_", "TORCHELASTIC_")) or k in (
               "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
               "MASTER_PORT", "GROUP_RANK", "ROLE_RANK"))}
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env.update(PYTHONPATH=os.pathsep.join([str(ROOT)] + paths), PYTHONUNBUFFERED="1",
               OMP_NUM_THREADS="1", RLFAST_DATA_DIR=str(tmp_path / "data"),
               RLFAST_KILL_RANK=str(killed_rank), RLFAST_KILL_MARKER=str(marker),
               RLFAST_KILL_PROGRESS=str(log_dir / "progress.csv"),
               RLFAST_KILL_ROWS=str(KILL_ITR))  # the rows of iterations 0-3
    return env


def _descendants(pid):
    """{pid: start time} of the live descendants of ``pid`` (torchrun starts each rank in
    a session of its own, so the run's processes are found by parentage, not session)."""
    try:
        children = psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return {}
    found = {}
    for child in children:
        try:
            found[child.pid] = child.create_time()
        except psutil.Error:
            pass
    return found


def _still_alive(seen):
    """The processes of ``seen`` ({pid: start time}) that still run (not a reused pid)."""
    alive = []
    for pid, started in seen.items():
        try:
            process = psutil.Process(pid)
            if process.create_time() == started and process.status() != psutil.STATUS_ZOMBIE:
                alive.append(pid)
        except psutil.Error:
            pass
    return alive


def _torchrun(tmp_path, argv, env):
    """Run torchrun to its end in its own session; returns (return code, stdout, stderr,
    {pid: start time} of every process seen under it). None of them is left afterwards."""
    out_path, err_path = tmp_path / "torchrun.out", tmp_path / "torchrun.err"
    with open(out_path, "w") as out, open(err_path, "w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", *argv],
                                cwd=tmp_path, env=env, stdout=out, stderr=err,
                                start_new_session=True)
    seen = {}
    try:
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while proc.poll() is None:
            assert time.monotonic() < deadline, f"torchrun still running after {RUN_TIMEOUT_S} s"
            seen.update(_descendants(proc.pid))
            time.sleep(0.05)
        deadline = time.monotonic() + 10
        while _still_alive(seen) and time.monotonic() < deadline:
            time.sleep(0.1)
        left = _still_alive(seen)
    finally:
        if proc.poll() is None:
            seen.update(_descendants(proc.pid))
            os.killpg(proc.pid, 9)
            proc.wait(timeout=30)
        for pid in _still_alive(seen):
            os.kill(pid, 9)
    assert left == [], f"processes of the run still alive: {left}"
    return proc.returncode, out_path.read_text(), err_path.read_text(), set(seen) | {proc.pid}


@pytest.mark.parametrize("killed_rank", [1, 0])
def test_a_killed_rank_is_restarted_from_the_last_snapshot(tmp_path, killed_rank):
    shm_before = shm_entries()
    log_dir, marker = tmp_path / "run", tmp_path / "killed"
    t0 = time.monotonic()
    code, out, err, pids = _torchrun(tmp_path, [
        "--standalone", "--nproc-per-node", str(WORLD), "--max-restarts", "1",
        "--monitor-interval", "0.1",
        "-m", "rlfast", "train", "ppo", ENV, "--sampler", "serial", "--no-progress",
        "--n-envs", str(N_ENVS), "--steps", str(N_ITR * ITR_STEPS), "--log-dir", str(log_dir),
        "--set", f"sampler.batch_T={BATCH_T}", "--set", "sampler.eval_n_envs=0",
        "--set", f"runner.log_interval_steps={ITR_STEPS}"],
        _env(tmp_path, log_dir, marker, killed_rank))
    elapsed = time.monotonic() - t0
    assert code == 0, f"torchrun exited {code}:\n{out[-3000:]}\n{err[-5000:]}"
    # the rank died on the first start, and only then
    assert marker.read_text().startswith(f"rank {killed_rank} restart 0 "), marker.read_text()
    assert out.count("Final training return") == 1, out[-3000:]
    # the restart resumed iteration 3's snapshot of the same run
    params = json.loads((log_dir / "params.json").read_text())
    assert params["launcher"] == "torchrun" and params["world_size"] == WORLD
    assert params["launcher_run_id"]
    assert [(r["launcher_restart"], r["from_itr"], r["from_steps"]) for r in params["resumes"]] \
        == [(1, KILL_ITR - 1, KILL_ITR * ITR_STEPS)]
    log = (log_dir / "debug.log").read_text()
    assert log.count("rank 0 of 2 (torchrun, backend gloo)") == 1
    assert log.count("rank 0 of 2 (torchrun restart 1, backend gloo)") == 1
    assert log.count(f"Resumed from iteration {KILL_ITR - 1} ({KILL_ITR * ITR_STEPS} steps)") == 1
    assert log.count(f"note: torchrun restart 1: resuming {log_dir} from params.pkl "
                     f"(iteration {KILL_ITR - 1})") == 1
    assert log.count("Training complete.") == 1
    # one row per iteration, each once: the first start's up to iteration 3, the restart's after
    with open(log_dir / "progress.csv", newline="") as f:
        header, *rows = list(csv.reader(f))
    assert all(len(r) == len(header) for r in rows)
    steps = [int(r[header.index(STEPS_KEY)]) for r in rows]
    itrs = [r[header.index(ITR_KEY)] for r in rows]
    assert steps == [ITR_STEPS * (i + 1) for i in range(N_ITR)], steps  # no evaluation row
    assert itrs == [str(i) for i in range(N_ITR)], itrs
    # nothing left: processes (checked in _torchrun), shared memory
    assert len(pids) >= 2 * WORLD + 1, f"the ranks of both starts were not seen: {pids}"
    kinds = ("pymp-", "psm_", "sem.mp-", "torch_", "rlfast")
    assert new_shm_entries(shm_before, prefixes=kinds,
                           also=lambda n: any(str(p) in n for p in pids)) == []
    assert live_children() == []
    print(f"\ntorchrun: rank {killed_rank} killed at iteration {KILL_ITR}, restarted, done in "
          f"{elapsed:.1f} s")
