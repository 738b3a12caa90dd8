"""Helpers for the multi-rank (SyncRl) launch tests: start ``rlfast train`` under torchrun
or with ``--world-size``, and account for every process it started.

Each run is started in a new session (its own process group, as a job at a terminal is)
with its working directory in the test's ``tmp_path`` and the repository root on
``PYTHONPATH`` (so ``tests.integration._sync_envs`` imports in every rank), its output in
a file. A run's processes are found two ways, so that none escapes: by its session id
(torchrun's workers and rlfast's forked ranks stay in it) and by a tag unique to the test
(its log directory) in their command lines.
"""
from __future__ import annotations

import csv
import os
import signal
import socket
import subprocess
import sys
import time

import psutil

from tests._leaks import new_shm_entries, shm_entries  # noqa: F401 (for the tests)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]
RLFAST = [sys.executable, "-m", "rlfast"]
# Variables through which a launcher (torchrun, Slurm) describes a rank: a test process that
# itself runs under one must not pass them on, or rlfast would join that job.
_LAUNCHER_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                  "MASTER_PORT", "GROUP_RANK", "ROLE_RANK", "ROLE_WORLD_SIZE", "NODE_RANK")
_LAUNCHER_PREFIXES = ("SLURM_", "TORCHELASTIC_", "RLFAST_SYNC_")


def torchrun(tmp_path) -> list:
    """``torchrun`` with its per-run log folders under ``tmp_path``: without ``--log-dir`` it
    makes a ``torchelastic_*`` folder in the system's temporary directory and leaves it."""
    return TORCHRUN + ["--log-dir", str(tmp_path / "torchrun-logs")]


def child_env(**extra: str) -> dict:
    """The environment of a run: this one without any launcher's variables (nor an earlier
    test's fault settings), the repository root first on ``PYTHONPATH``, and ``extra``."""
    env = {k: v for k, v in os.environ.items()
           if k not in _LAUNCHER_VARS and not k.startswith(_LAUNCHER_PREFIXES)}
    env["PYTHONPATH"] = REPO + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("OMP_NUM_THREADS", "1")  # what torchrun sets; 2 ranks on 2 shared cores
    env.update(extra)
    return env


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _default_sigint() -> None:  # in the child, before exec
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start(cmd: list, cwd, out_path, env: dict, default_sigint: bool = False) -> subprocess.Popen:
    """Start ``cmd`` in a new session with stdout and stderr into ``out_path``.

    ``default_sigint``: SIGINT's default disposition in the child, so Python installs its
    KeyboardInterrupt handler even when this test runs in a background shell (which starts
    every process with SIGINT ignored, and an ignored signal stays ignored across exec)."""
    with open(out_path, "wb") as out:
        return subprocess.Popen(cmd, cwd=str(cwd), env=env, stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True,
                                preexec_fn=_default_sigint if default_sigint else None)


def run_processes(tag: str, sids=()) -> list:
    """Live processes (zombies, already dead, are left out) of the sessions ``sids`` or with
    ``tag`` in their command line; never this process."""
    found = []
    me = os.getpid()
    for proc in psutil.process_iter(["pid"]):
        if proc.pid == me:
            continue
        try:
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
            if os.getsid(proc.pid) in sids or tag in " ".join(proc.cmdline()):
                found.append(proc)
        except (ProcessLookupError, PermissionError, psutil.Error):
            continue
    return found


def describe(procs: list) -> list:
    out = []
    for p in procs:
        try:
            out.append(f"{p.pid} {' '.join(p.cmdline())[:200]}")
        except psutil.Error:
            out.append(str(p.pid))
    return out


def kill_all(popens: list, tag: str) -> None:
    """Kill whatever the runs left (their sessions and anything carrying ``tag``) and reap
    the direct children."""
    sids = tuple(p.pid for p in popens)
    for proc in run_processes(tag, sids):
        try:
            proc.kill()
        except psutil.Error:
            pass
    for p in popens:
        if p.poll() is None:
            p.kill()
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass


def wait_all_gone(popens: list, tag: str, deadline: float, poll_s: float = 0.1):
    """Wait until every ``popen`` has exited and no process of theirs (session or ``tag``)
    is left; return ``time.monotonic()`` at that moment, or None at ``deadline``
    (a ``time.monotonic()`` value)."""
    sids = tuple(p.pid for p in popens)
    while True:
        exited = all(p.poll() is not None for p in popens)
        if exited and not run_processes(tag, sids):
            return time.monotonic()
        if time.monotonic() >= deadline:
            return None
        time.sleep(poll_s)


def wait_for_file(path, popens: list, out_path, limit_s: float, nonempty: bool = True) -> None:
    """Block until ``path`` exists (and holds something); AssertionError, with the run's
    output, when a run ends first or ``limit_s`` passes."""
    deadline = time.monotonic() + limit_s
    while not (os.path.exists(path) and (not nonempty or os.path.getsize(path) > 0)):
        ended = [p.returncode for p in popens if p.poll() is not None]
        if ended:
            raise AssertionError(f"the run ended (status {ended}) before {path} appeared:\n"
                                 + tail(out_path))
        if time.monotonic() > deadline:
            raise AssertionError(f"{path} did not appear within {limit_s} s:\n" + tail(out_path))
        time.sleep(0.05)


def tail(path, n: int = 4000) -> str:
    try:
        with open(path, errors="replace") as f:
            return f.read()[-n:]
    except OSError as e:
        return f"<no output: {e}>"


def read_text(path) -> str:
    with open(path, errors="replace") as f:
        return f.read()


def read_progress(path) -> list:
    """The rows of a progress.csv, each a dict of column -> float."""
    with open(path, newline="") as f:
        return [{k: float(v) for k, v in row.items()} for row in csv.DictReader(f)]


def find_files(root, name: str) -> list:
    """Every file called ``name`` under ``root``."""
    return sorted(os.path.join(d, name) for d, _, files in os.walk(str(root)) if name in files)


