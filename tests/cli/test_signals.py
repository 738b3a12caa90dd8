"""``rlfast train`` stopped by SIGTERM (Slurm, Kubernetes, ``timeout``) or Ctrl-C: it logs the
interruption, keeps its logs and a loadable final snapshot, leaves no child process or shared
memory behind and exits with 128 + the signal number."""
import csv
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from rlfast.utils.logging import load_snapshot
from tests._leaks import new_shm_entries, shm_entries
from tests.integration._guards import session_pids

START_TIMEOUT_S = 240  # slow shared cores: startup, imports and the pre-training evaluation
EXIT_TIMEOUT_S = 30

# The command line as a user runs it, but with the default signal dispositions installed
# explicitly: a shell that starts pytest in the background makes children ignore SIGINT.
_CHILD = """
import signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)
signal.signal(signal.SIGTERM, signal.SIG_DFL)
from rlfast.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _rows(path):
    try:
        with open(path, newline="") as f:
            return list(csv.reader(f))
    except FileNotFoundError:
        return []


def _interrupt_run(tmp_path, sampler, signum, group=False):
    """Start a long run in its own session, wait until a training row is logged, send
    ``signum`` to the master (with ``group``: to its whole process group, as Slurm does);
    return (process, stdout, stderr, log_dir, pids seen)."""
    log_dir = tmp_path / "run"
    cmd = [sys.executable, "-c", _CHILD, "train", "ppo", "CartPole-v1", "--steps", "10000000",
           "--sampler", sampler, "--n-envs", "2", "--log-dir", str(log_dir), "--no-progress",
           "--set", "sampler.batch_T=32", "--set", "runner.log_interval_steps=256",
           "--set", "sampler.eval_n_envs=2", "--set", "sampler.eval_max_steps=200",
           "--set", "sampler.max_decorrelation_steps=10"]
    proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    pids = {proc.pid}
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        # Row 1 is the pre-training evaluation; row 2 the first interval of training.
        while len(_rows(log_dir / "progress.csv")) < 3:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no training row logged in time"
            time.sleep(0.1)
        pids.update(session_pids(proc.pid))
        time.sleep(0.3)  # into the next interval, so a final snapshot is due
        if group:
            os.killpg(proc.pid, signum)
        else:
            proc.send_signal(signum)
        out, err = proc.communicate(timeout=EXIT_TIMEOUT_S)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    return proc, out, err, log_dir, pids


def _check_interrupted(proc, out, err, log_dir, pids, shm_before, signame, code):
    assert proc.returncode == code, err
    assert f"rlfast: interrupted ({signame})" in err
    assert "Traceback" not in err
    log = (log_dir / "debug.log").read_text()
    found = re.search(r"Training interrupted by .*?after (\d+) iterations \((\d+) steps\)", log)
    assert found and signame in found.group(0), log[-2000:]
    assert "Training complete." not in log and "Training complete." not in out
    assert "Final evaluation return" not in out
    # progress.csv: a header and whole rows, every one as wide as the header.
    rows = _rows(log_dir / "progress.csv")
    assert len(rows) >= 3 and all(len(r) == len(rows[0]) for r in rows[1:])
    last_logged = int(rows[-1][rows[0].index("Diagnostics/CumSteps")])
    # The final snapshot covers every finished iteration, past the last logged row.
    snap = load_snapshot(log_dir / "params.pkl")
    assert snap["cum_steps"] == int(found.group(2)) >= last_logged
    assert snap["itr"] == int(found.group(1)) - 1
    assert "agent_state_dict" in snap and "optimizer_state_dict" in snap
    # No process of the run's session is left, and no shared memory it named.
    deadline = time.monotonic() + 10
    while session_pids(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert session_pids(proc.pid) == []
    leaked = new_shm_entries(shm_before, prefixes=("pymp-", "psm_"),
                             also=lambda n: any(str(p) in n for p in pids))
    assert leaked == []


@pytest.mark.parametrize("sampler,group", [("serial", False), ("cpu", False), ("cpu", True)])
def test_sigterm_stops_cleanly_with_final_snapshot(tmp_path, sampler, group):
    shm_before = shm_entries()
    proc, out, err, log_dir, pids = _interrupt_run(tmp_path, sampler, signal.SIGTERM, group)
    if sampler == "cpu":
        # Real worker processes (one per core the run may use, at most one per env).
        assert len(pids) >= 2, "expected the master and its sampler workers"
    _check_interrupted(proc, out, err, log_dir, pids, shm_before, "SIGTERM", 143)


def test_ctrl_c_stops_cleanly_with_final_snapshot(tmp_path):
    shm_before = shm_entries()
    proc, out, err, log_dir, pids = _interrupt_run(tmp_path, "cpu", signal.SIGINT)
    _check_interrupted(proc, out, err, log_dir, pids, shm_before, "SIGINT", 130)
