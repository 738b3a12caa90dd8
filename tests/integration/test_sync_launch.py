"""Multi-rank training (SyncRlEval) launched for real: torchrun on one node, torchrun as two
"nodes" on one machine, and ``rlfast train --world-size 2``, each training PPO with two ranks
on CPU (gloo), through the ``rlfast`` command line.

Successful launches check what a user relies on: exit status 0, rank 0 alone writes the
run's files (one progress.csv and params.json) and prints the result (once), and the
logged ``CumSteps`` counts the steps of every rank (``(Iteration + 1) * 2 * T * B``).

Faults (the environment of _sync_envs.py faults on rank 1 only, after 300 steps of one
training environment; both ranks make the same environment id) check that a multi-rank run
never outlives the failure of one rank:

- rank 1 raises: the run (torchrun and both ranks; or the spawning process and the ranks
  it forked) exits non-zero within 30 s of the fault (the acceptance bound), rank 1's
  exception is in the output;
- rank 1 hangs: with ``--set distributed.dist_timeout=3`` the other rank's collective times
  out and the run exits non-zero within the timeout plus 30 s, instead of hanging (3 s keeps
  the test short; runs without a fault survive even ``dist_timeout=1`` on a loaded 2-core
  machine, so the ranks never wait on each other for that long);
- Ctrl-C (SIGINT to the process group, the default SIGINT disposition restored in the run
  even when the tests run in a background shell): a ``--world-size 2`` run exits with
  status 130, a torchrun run non-zero, within 30 s;
- rank 1 raises while the process supervising ``--world-size`` ranks is descheduled
  (SIGSTOP for 3 s), so that rank 0's secondary error (its collective lost rank 1) is
  waiting too: rank 1's exception, the first failure, must still be the one reported.

Every case also checks that no process of the run is left (its session, or anything with
the test's log directory in its command line) and that no new ``/dev/shm`` entry remains.
Times are measured from the fault (the monotonic time the environment wrote into its
marker file, or the moment the signal was sent) to the moment no process is left.
"""
import json
import math
import os
import re
import signal
import time
import uuid

import pytest

from tests.integration import _sync_helpers as h
from tests.integration._guards import watchdog  # noqa: F401 - fixture
from tests.integration._sync_envs import ENV_ID, RAISE_MESSAGE

STEPS = 6000              # a short successful run: 3 iterations of 2 ranks x 64 x 16
RUN_LIMIT_S = 75.0        # a short run's whole life on a loaded 2-core machine (5-10 s seen)
REACH_FAULT_S = 45.0      # startup of every process, then 300 steps of one environment
AFTER_FAULT_S = 30.0      # the acceptance bound: everything gone within 30 s of the fault
DIST_TIMEOUT_S = 3        # --set distributed.dist_timeout for the hung-rank cases (the
                          # ranks' usual waits on each other are well below 1 s)
# The watchdog (which ends the whole session) only backs up the tests' own limits above.
GUARD_MARGIN_S = 20.0
FAULT_STEP = 300
LAUNCHERS = ("torchrun", "world-size")


def _train_args(env_id: str, log_dir, steps: int, *extra: str) -> list:
    return ["train", "ppo", env_id, "--sampler", "serial", "--steps", str(steps),
            "--log-dir", str(log_dir), "--no-progress", *extra]


def _standalone(tmp_path, args: list, *torchrun_opts: str) -> list:
    return h.torchrun(tmp_path) + ["--standalone", "--nproc-per-node", "2", *torchrun_opts,
                                   "-m", "rlfast"] + args


def _check_rank0_logged(tmp_path, log_dir, output: str, launcher: str) -> None:
    """One run's files, written by rank 0 alone, and global step counts."""
    progress = h.find_files(tmp_path, "progress.csv")
    params = h.find_files(tmp_path, "params.json")
    assert progress == [os.path.join(str(log_dir), "progress.csv")], (progress, output[-3000:])
    assert params == [os.path.join(str(log_dir), "params.json")], params
    assert len(h.find_files(tmp_path, "debug.log")) == 1
    with open(params[0]) as f:
        logged = json.load(f)
    assert logged["world_size"] == 2 and logged["launcher"] == launcher, logged
    T, B = logged["config"]["sampler"]["batch_T"], logged["config"]["sampler"]["batch_B"]
    per_itr = 2 * T * B  # both ranks' steps
    rows = h.read_progress(progress[0])
    assert rows, "progress.csv has no rows"
    assert rows[0]["Diagnostics/CumSteps"] == 0  # the evaluation before training
    training = [r for r in rows if r["Diagnostics/Iteration"] >= 0]
    assert training, rows
    for row in training:
        steps = row["Diagnostics/CumSteps"]
        assert steps % per_itr == 0, (steps, per_itr)
        assert steps == (row["Diagnostics/Iteration"] + 1) * per_itr, row
    n_itr = math.ceil(STEPS / per_itr)
    assert training[-1]["Diagnostics/Iteration"] == n_itr - 1, training[-1]
    assert training[-1]["Diagnostics/CumSteps"] == n_itr * per_itr >= STEPS
    assert output.count("Final evaluation return") == 1, output[-3000:]
    assert output.count(f"rank 0 of 2 ({launcher}") == 1, output[-3000:]


def test_torchrun_standalone_two_ranks(tmp_path, watchdog):  # noqa: F811
    watchdog(RUN_LIMIT_S + GUARD_MARGIN_S)
    log_dir, tlog, out = tmp_path / "run", tmp_path / "torchrun-logs", tmp_path / "output.txt"
    cmd = _standalone(tmp_path, _train_args("CartPole-v1", log_dir, STEPS),
                      "--redirects", "3", "--tee", "3")
    proc = h.start(cmd, tmp_path, out, h.child_env())
    try:
        gone = h.wait_all_gone([proc], str(log_dir), time.monotonic() + RUN_LIMIT_S)
        output = h.read_text(out)
        assert gone is not None, f"still running after {RUN_LIMIT_S} s:\n{output[-3000:]}"
        assert proc.returncode == 0, output[-3000:]
    finally:
        h.kill_all([proc], str(log_dir))
    _check_rank0_logged(tmp_path, log_dir, output, "torchrun")
    # torchrun kept each rank's own output apart: rank 1 printed nothing at all.
    rank_out = {int(os.path.basename(os.path.dirname(p))): h.read_text(p)
                for p in h.find_files(tlog, "stdout.log")}
    assert sorted(rank_out) == [0, 1], rank_out
    assert rank_out[1] == "", rank_out[1][-2000:]
    assert rank_out[0].count("Final evaluation return") == 1, rank_out[0][-2000:]
    assert "Traceback" not in output


def test_torchrun_two_nodes_on_one_machine(tmp_path, watchdog):  # noqa: F811
    """Two torchrun agents of one node each meet through a c10d rendezvous on 127.0.0.1."""
    watchdog(RUN_LIMIT_S + GUARD_MARGIN_S)
    log_dir = tmp_path / "run"
    port, rdzv_id = h.free_port(), f"rlfast-test-{uuid.uuid4().hex}"
    cmd = h.torchrun(tmp_path) + [
        "--nnodes", "2", "--nproc-per-node", "1", "--rdzv-backend", "c10d",
        "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", rdzv_id,
        "-m", "rlfast"] + _train_args("CartPole-v1", log_dir, STEPS)
    outs = [tmp_path / "node0.txt", tmp_path / "node1.txt"]
    procs = []
    try:
        for out in outs:
            procs.append(h.start(cmd, tmp_path, out, h.child_env()))
        gone = h.wait_all_gone(procs, str(log_dir), time.monotonic() + RUN_LIMIT_S)
        outputs = [h.read_text(out) for out in outs]
        joined = "\n".join(outputs)
        assert gone is not None, f"still running after {RUN_LIMIT_S} s:\n{joined[-4000:]}"
        assert [p.returncode for p in procs] == [0, 0], joined[-4000:]
    finally:
        h.kill_all(procs, str(log_dir))
    _check_rank0_logged(tmp_path, log_dir, joined, "torchrun")
    # Exactly one of the two agents ran rank 0 and printed the result.
    assert sorted(o.count("Final evaluation return") for o in outputs) == [0, 1], joined[-4000:]


def _fault_command(launcher: str, log_dir, *extra: str) -> list:
    args = _train_args(ENV_ID, log_dir, 100_000_000, *extra)
    if launcher == "torchrun":
        return _standalone(log_dir.parent, args)
    return h.RLFAST + args + ["--world-size", "2"]


def _run_fault(tmp_path, launcher: str, fault: str, bound_s: float, *extra: str,
               fault_env: dict | None = None):
    """Start a run whose rank 1 faults; return (status, output, seconds from the fault until
    no process of the run is left). Fails when processes outlive ``bound_s``."""
    log_dir, out, marker = tmp_path / "run", tmp_path / "output.txt", tmp_path / "fault.marker"
    env = h.child_env(RLFAST_SYNC_FAULT=fault, RLFAST_SYNC_FAULT_RANK="1",
                      RLFAST_SYNC_FAULT_STEP=str(FAULT_STEP),
                      RLFAST_SYNC_FAULT_MARKER=str(marker), **(fault_env or {}))
    before = h.shm_entries()
    proc = h.start(_fault_command(launcher, log_dir, *extra), tmp_path, out, env)
    tag = str(log_dir)
    try:
        h.wait_for_file(marker, [proc], out, REACH_FAULT_S)
        time.sleep(0.05)  # the marker is written whole right after it is created
        fault_time, _, fault_rank = h.read_text(marker).split()
        assert fault_rank == "1"
        fault_time = float(fault_time)  # time.monotonic() of the faulting process
        gone = h.wait_all_gone([proc], tag, fault_time + bound_s)
        output = h.read_text(out)
        left = h.describe(h.run_processes(tag, (proc.pid,)))
        assert gone is not None, (f"{launcher}/{fault}: processes alive {bound_s} s after the "
                                  f"fault (exit status {proc.poll()}): {left}\n{output[-4000:]}")
    finally:
        h.kill_all([proc], tag)
    assert h.new_shm_entries(before) == []
    return proc.returncode, output, gone - fault_time


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_failing_rank_ends_every_process(launcher, tmp_path, watchdog):  # noqa: F811
    watchdog(REACH_FAULT_S + AFTER_FAULT_S + GUARD_MARGIN_S)
    status, output, elapsed = _run_fault(tmp_path, launcher, "raise", AFTER_FAULT_S)
    print(f"{launcher}: rank 1 raised; every process gone {elapsed:.1f} s later, exit {status}")
    assert status != 0, output[-4000:]
    # Rank 1's own traceback, with its exception, reaches the user.
    assert re.search(rf"RuntimeError: {re.escape(RAISE_MESSAGE)} 1 \(pid \d+\)", output), \
        output[-4000:]
    assert "Traceback (most recent call last)" in output
    if launcher == "world-size":  # rank 0 names the rank that failed
        assert re.search(r"RankFailedError: Rank 1 \(pid \d+\) raised", output), output[-4000:]
    assert "Final evaluation return" not in output and "Training complete." not in output
    assert elapsed <= AFTER_FAULT_S


def test_failing_rank_traceback_survives_a_descheduled_supervisor(tmp_path, watchdog):  # noqa: F811
    """As test_failing_rank_ends_every_process[world-size], but the process supervising the
    ranks is stopped (SIGSTOP, continued 3 s later) just before rank 1 raises, as a busy
    machine may deschedule it: by the time it reads its pipes, rank 0 has failed too (its
    collective lost its peer). The user must still see rank 1's exception."""
    watchdog(REACH_FAULT_S + AFTER_FAULT_S + GUARD_MARGIN_S)
    status, output, elapsed = _run_fault(tmp_path, "world-size", "stop-parent-raise",
                                         AFTER_FAULT_S,
                                         fault_env=dict(RLFAST_SYNC_FAULT_STOP_S="3"))
    print(f"descheduled supervisor: every process gone {elapsed:.1f} s later, exit {status}")
    assert status != 0, output[-4000:]
    assert elapsed <= AFTER_FAULT_S
    assert re.search(rf"RuntimeError: {re.escape(RAISE_MESSAGE)} 1 \(pid \d+\)", output), \
        output[-4000:]
    assert re.search(r"RankFailedError: Rank 1 \(pid \d+\) raised", output), output[-4000:]


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_hung_rank_times_out(launcher, tmp_path, watchdog):  # noqa: F811
    """Rank 1 sleeps forever inside env.step: rank 0's next collective gives up after
    ``dist_timeout`` seconds and the run ends instead of hanging."""
    bound = DIST_TIMEOUT_S + AFTER_FAULT_S
    watchdog(REACH_FAULT_S + bound + GUARD_MARGIN_S)
    status, output, elapsed = _run_fault(tmp_path, launcher, "hang", bound,
                                         "--set", f"distributed.dist_timeout={DIST_TIMEOUT_S}")
    print(f"{launcher}: rank 1 hung; every process gone {elapsed:.1f} s later, exit {status}")
    assert status != 0, output[-4000:]
    assert re.search(rf"[Tt]imed out waiting {DIST_TIMEOUT_S * 1000}ms", output), output[-4000:]
    assert "Final evaluation return" not in output and "Training complete." not in output
    assert elapsed <= bound


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_sigint_to_process_group_ends_every_process(launcher, tmp_path, watchdog):  # noqa: F811
    """Ctrl-C at a terminal: SIGINT reaches every process of the foreground group at once
    (torchrun and its ranks; or the spawning process and its forked ranks). A
    ``--world-size`` run reports the interrupt with rlfast's status 130; torchrun's own
    agent decides its status (non-zero)."""
    watchdog(REACH_FAULT_S + AFTER_FAULT_S + GUARD_MARGIN_S)
    log_dir, out = tmp_path / "run", tmp_path / "output.txt"
    args = _train_args("CartPole-v1", log_dir, 100_000_000,
                       "--set", "runner.log_interval_steps=2048")
    cmd = (_standalone(tmp_path, args) if launcher == "torchrun"
           else h.RLFAST + args + ["--world-size", "2"])
    before = h.shm_entries()
    proc = h.start(cmd, tmp_path, out, h.child_env(), default_sigint=True)
    tag = str(log_dir)
    try:
        progress = log_dir / "progress.csv"
        deadline = time.monotonic() + REACH_FAULT_S
        while not (progress.exists() and len(h.read_progress(progress)) >= 3):
            assert proc.poll() is None, f"ended early ({proc.returncode}):\n{h.tail(out)}"
            assert time.monotonic() < deadline, f"no training rows:\n{h.tail(out)}"
            time.sleep(0.1)
        assert len(h.run_processes(tag, (proc.pid,))) >= 3  # launcher + 2 training ranks
        os.killpg(proc.pid, signal.SIGINT)
        sent = time.monotonic()
        gone = h.wait_all_gone([proc], tag, sent + AFTER_FAULT_S)
        output = h.read_text(out)
        left = h.describe(h.run_processes(tag, (proc.pid,)))
        assert gone is not None, f"alive {AFTER_FAULT_S} s after SIGINT: {left}\n{output[-4000:]}"
    finally:
        h.kill_all([proc], tag)
    print(f"{launcher} SIGINT: every process gone {gone - sent:.1f} s later, "
          f"exit {proc.returncode}")
    if launcher == "world-size":
        assert proc.returncode == 130, output[-4000:]
        assert "rlfast: interrupted (SIGINT)" in output, output[-4000:]
    else:
        assert proc.returncode != 0, output[-4000:]
        assert re.search(r"rlfast: interrupted \(SIG(INT|TERM)\)", output), output[-4000:]
    assert "Training complete." not in output and "Final evaluation return" not in output
    assert h.new_shm_entries(before) == []
