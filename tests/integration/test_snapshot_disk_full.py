"""Disk full during a snapshot: the error names it, the previous snapshot stays intact (the
partial file is removed, and so are the sidecars of the failed save), and the run ends
cleanly: its workers stopped, no process and no ``/dev/shm`` entry left.

The disk fills in two ways here, both through the kernel: writes into ``/dev/full`` (ENOSPC,
what a full filesystem answers; ``torch.save`` wraps it in a ``RuntimeError`` of its own,
from which the error is still told), and a file-size limit (``RLIMIT_FSIZE``: EFBIG) under
which a whole ``rlfast train`` run with the cpu sampler's workers writes its third snapshot.
"""
import errno
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from rlfast.utils.logging import NoSpaceError, load_snapshot, logger, logger_context
from rlfast.utils.logging import serialization
from tests._leaks import new_shm_entries, shm_entries
from tests.integration._guards import session_pids, watchdog  # noqa: F401 - fixture
from tests.integration.test_kill_and_resume import _csv, _env, _reap

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def disk_full(monkeypatch):
    """``fill(pattern)``: from now on, the temporary files of ``atomic_write`` whose name
    matches ``pattern`` are opened on ``/dev/full``, where every write fails with ENOSPC."""
    real_open = os.open
    patterns = []

    def open_(path, flags, mode=0o777, *args, **kwargs):
        name = os.path.basename(os.fspath(path))
        if any(re.fullmatch(p, name) for p in patterns):
            return real_open("/dev/full", os.O_WRONLY)
        return real_open(path, flags, mode, *args, **kwargs)

    monkeypatch.setattr(serialization.os, "open", open_)
    return patterns.append


def _snapshot(itr, size=20_000):
    return {"itr": itr, "weights": torch.full((size,), float(itr))}


def _replay(values):
    return {"replay.npz": lambda f: np.savez(f, a=np.full(50_000, values))}


def test_enospc_in_torch_save_names_the_snapshot_and_keeps_the_previous(tmp_path, disk_full):
    with logger_context(str(tmp_path), 0, "d", {}, override_prefix=True, snapshot_mode="last"):
        logger.save_itr_params(0, _snapshot(0))
        disk_full(r"\.params\.pkl\.[0-9a-f]+\.tmp")
        with pytest.raises(NoSpaceError) as caught:
            logger.save_itr_params(1, _snapshot(1))
    error = caught.value
    assert error.errno == errno.ENOSPC
    path = tmp_path / "params.pkl"
    assert str(error).startswith(f"[Errno {errno.ENOSPC}] no space left on device while "
                                 f"writing the snapshot {path}; nothing was replaced"), error
    assert f"rlfast resume {tmp_path}" in str(error)
    assert isinstance(error.__cause__, (RuntimeError, OSError))  # what the write raised
    previous = load_snapshot(path)  # digest checked: intact
    assert previous["itr"] == 0 and float(previous["weights"][0]) == 0.0
    assert sorted(os.listdir(tmp_path)) == ["debug.log", "params.json", "params.pkl",
                                            "progress.csv"]


def test_a_failed_save_removes_its_sidecars_and_keeps_the_previous_ones(tmp_path, disk_full):
    """The replay file is written first: when the snapshot after it does not fit, it belongs
    to no snapshot and is removed; when the replay file itself does not fit, nothing of the
    save remains. The previous snapshot keeps its own replay file throughout."""
    with logger_context(str(tmp_path), 0, "d", {}, override_prefix=True, snapshot_mode="last"):
        logger.save_itr_params(0, _snapshot(0), sidecars=_replay(0.0))
        disk_full(r"\.params\.pkl\.[0-9a-f]+\.tmp")  # the snapshot, not its replay file
        with pytest.raises(NoSpaceError, match="while writing the snapshot "):
            logger.save_itr_params(1, _snapshot(1), sidecars=_replay(1.0))
        disk_full(r"\.params\.pkl\.\d+\.replay\.npz\.[0-9a-f]+\.tmp")
        with pytest.raises(NoSpaceError, match="while writing the replay.npz file of the "
                                               "snapshot .*params.pkl.2.replay.npz"):
            logger.save_itr_params(2, _snapshot(2), sidecars=_replay(2.0))
    assert sorted(os.listdir(tmp_path)) == ["debug.log", "params.json", "params.pkl",
                                            "params.pkl.0.replay.npz", "progress.csv"]
    previous = load_snapshot(tmp_path / "params.pkl")
    assert previous["itr"] == 0 and previous["sidecar_files"] == {
        "replay.npz": "params.pkl.0.replay.npz"}
    with np.load(tmp_path / "params.pkl.0.replay.npz") as replay:
        assert float(replay["a"][0]) == 0.0


FAIL_AT = 3  # the snapshot that does not fit: two were written before it
RUN = ["train", "ppo", "CartPole-v1", "--sampler", "cpu", "--n-envs", "2", "--steps", "2048",
       "--no-progress", "--snapshot-mode", "last", "--set", "sampler.batch_T=64",
       "--set", "runner.log_interval_steps=256", "--set", "sampler.eval_max_steps=100"]
# 128 steps per iteration: a row (and its snapshot) every 2 iterations.


def test_run_ends_cleanly_when_its_snapshot_does_not_fit(tmp_path, watchdog):  # noqa: F811
    """A whole run (with sampler workers) whose third snapshot meets a file-size limit: the
    run exits with the named error after stopping its workers, and the second snapshot is
    on disk, whole, with no partial file beside it."""
    watchdog(300)
    shm_before = shm_entries()
    run_dir = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "tests.integration._disk_full_run",
                             str(FAIL_AT), *RUN, "--log-dir", str(run_dir)],
                            cwd=ROOT, env=_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=240)
    finally:
        _reap(proc)
    assert proc.returncode == 1, (out[-2000:], err[-3000:])
    last = err.strip().splitlines()[-1]
    assert "Traceback" not in err, err[-3000:]  # one line, as a configuration error is
    assert last.startswith(f"rlfast: error: [Errno "
                           f"{errno.EFBIG}] file size limit reached while writing the "
                           f"snapshot {run_dir / 'params.pkl'}; nothing was replaced"), last
    previous = load_snapshot(run_dir / "params.pkl")
    header, rows = _csv(run_dir / "progress.csv")
    steps = [int(r[header.index("Diagnostics/CumSteps")]) for r in rows]
    # Rows before training, at 256 and 512 steps (snapshots 1 and 2, iterations 1 and 3),
    # and the row of the third, written before its snapshot failed.
    assert steps == [0, 256, 512, 768]
    assert (previous["itr"], previous["cum_steps"]) == (3, 512)
    assert [n for n in os.listdir(run_dir) if n.endswith(".tmp")] == []
    assert session_pids(proc.pid) == []  # the master and its workers are gone
    assert new_shm_entries(shm_before) == []
