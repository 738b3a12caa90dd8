"""The power-cut case: ``rlfast train`` SIGKILLed without warning (its whole session, as a
power cut or the OOM killer would) resumes with ``rlfast resume`` and loses at most one
snapshot interval.

The run snapshots on the wall clock (``--snapshot-every``) with a cadence that is due at the
end of every iteration, and logs rows only before training and at the end, so that every
snapshot but the last comes from the clock. It is killed once a snapshot exists and a few more
iterations ran. Its ``debug.log`` says which iterations finished (each ends with "itr #N
saving snapshot..."): the snapshot on disk must be of the last of them, or of the one before
when the kill cut that save short. ``rlfast resume`` then continues from the snapshot's
iteration, trains to the run's budget, and leaves no process, temporary file or ``/dev/shm``
entry behind. (``test_kill_and_resume.py`` aims its kills at the saves themselves.)
"""
import json
import os
import re
import signal
import subprocess
import time

from rlfast.utils.logging import load_snapshot
from tests._leaks import new_shm_entries, shm_entries
from tests.integration._guards import session_pids, watchdog  # noqa: F401 - fixture
from tests.integration.test_kill_and_resume import STEPS_KEY, _column, _popen, _reap

BATCH = 128  # steps per iteration: 2 environments x 64
N_ITR = 12
KILL_AFTER_ITR = 4  # kill once this iteration ended: several snapshots were written by then
TRAIN = ["train", "ppo", "CartPole-v1", "--sampler", "serial", "--n-envs", "2",
         "--steps", str(N_ITR * BATCH), "--no-progress", "--snapshot-mode", "last",
         "--snapshot-every", "1e-9",  # due at the end of every iteration
         "--set", "sampler.batch_T=64", "--set", f"runner.log_interval_steps={N_ITR * BATCH}",
         "--set", "sampler.eval_max_steps=100"]
_SAVING = re.compile(r"itr #(\d+) saving snapshot")


def _saves_logged(run_dir):
    """The iterations whose end (and snapshot) ``debug.log`` announced, in order."""
    try:
        text = (run_dir / "debug.log").read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return []
    return [int(m.group(1)) for m in _SAVING.finditer(text)]


def _start_and_cut_power(tmp_path, run_dir):
    """Start the run, SIGKILL its whole session once iteration KILL_AFTER_ITR ended, and
    return (the iterations that ended before the kill, the session id)."""
    proc = _popen(TRAIN + ["--log-dir", str(run_dir)], tmp_path)
    try:
        deadline = time.monotonic() + 180
        while not _saves_logged(run_dir) or _saves_logged(run_dir)[-1] < KILL_AFTER_ITR:
            assert proc.poll() is None, f"the run exited early:\n{proc.communicate()[1][-3000:]}"
            assert time.monotonic() < deadline, f"iteration {KILL_AFTER_ITR} did not end in time"
            time.sleep(0.002)
        os.killpg(proc.pid, signal.SIGKILL)  # its session: every process of the run at once
        proc.wait(timeout=30)
    finally:
        _reap(proc)
    assert proc.returncode == -signal.SIGKILL
    return _saves_logged(run_dir), proc.pid


def _resume(tmp_path, run_dir):
    """``rlfast resume RUN_DIR`` to completion: (returncode, stdout, stderr, session id)."""
    proc = _popen(["resume", str(run_dir), "--no-progress"], tmp_path, stdout=subprocess.PIPE)
    try:
        out, err = proc.communicate(timeout=240)
    finally:
        _reap(proc)
    return proc.returncode, out, err, proc.pid


def test_sigkilled_run_loses_at_most_one_snapshot_interval(tmp_path, watchdog):  # noqa: F811
    watchdog(300)
    shm_before = shm_entries()
    run_dir = tmp_path / "ppo"
    ended, killed_session = _start_and_cut_power(tmp_path, run_dir)
    assert ended == list(range(len(ended))), ended  # one snapshot per iteration, in order
    last_ended = ended[-1]
    assert last_ended < N_ITR - 1, "the run finished before it was killed"

    # What survived: a whole snapshot of the last iteration that ended, or of the one before
    # it when the kill fell inside that save. At most one interval (here one iteration) lost.
    snapshot = load_snapshot(run_dir / "params.pkl")  # digest checked: intact
    snap_itr = int(snapshot["itr"])
    assert last_ended - 1 <= snap_itr <= last_ended, (snap_itr, ended)
    assert snapshot["cum_steps"] == (snap_itr + 1) * BATCH

    rc, out, err, resumed_session = _resume(tmp_path, run_dir)
    assert rc == 0, err[-3000:]
    assert "Traceback" not in err
    assert f"Resumed from iteration {snap_itr} ({(snap_itr + 1) * BATCH} steps)" in out, out
    params = json.loads((run_dir / "params.json").read_text())
    assert [(r["from_itr"], r["from_steps"]) for r in params["resumes"]] == \
        [(snap_itr, (snap_itr + 1) * BATCH)]
    assert params["snapshot_every"] == 1e-9  # the resumed run kept the cadence
    # The resumed run went on from the snapshot: its first save is of the next iteration,
    # and it trained to the budget.
    after = _saves_logged(run_dir)[len(ended):]
    assert after[0] == snap_itr + 1 and after[-1] == N_ITR - 1, after
    final = load_snapshot(run_dir / "params.pkl")
    assert (final["itr"], final["cum_steps"]) == (N_ITR - 1, N_ITR * BATCH)
    assert [int(s) for s in _column(run_dir / "progress.csv", STEPS_KEY)] == [0, N_ITR * BATCH]

    # Nothing left behind: no temporary file, no process of either session, no /dev/shm entry.
    assert [n for n in os.listdir(run_dir) if n.endswith(".tmp")] == []
    assert session_pids(killed_session) == [] and session_pids(resumed_session) == []
    assert new_shm_entries(shm_before) == []
