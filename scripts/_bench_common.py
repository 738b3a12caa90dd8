"""Helpers shared by the benchmark scripts in this folder."""
from __future__ import annotations

import atexit
import os
import platform
import shutil
import signal
import subprocess
import tempfile
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def machine() -> str:
    """One line naming the CPU, core count, GPU (if any), Python and torch versions."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    import torch
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    return (f"{cpu}, {os.cpu_count()} cores, {gpu}, Python {platform.python_version()}, "
            f"torch {torch.__version__}, {platform.system()} {platform.release()}")


def rate(step, items_per_call: int, seconds: float) -> float:
    """Items per second of repeated ``step()`` over about ``seconds`` (after one warm-up)."""
    step()
    calls, start = 0, time.perf_counter()
    while True:
        step()
        calls += 1
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return calls * items_per_call / elapsed


def sb3_log_dir() -> None:
    """Give Stable-Baselines3 a logger folder that goes away with this process.

    SB3 makes one on every ``learn`` even when it logs nothing: ``$SB3_LOGDIR``, else a new
    ``/tmp/SB3-<time>`` that nobody removes. Call this first in a benchmark's ``main``: child
    processes inherit ``SB3_LOGDIR``, and the folder is removed when this process exits. A
    ``SB3_LOGDIR`` set by the caller is left alone."""
    if os.environ.get("SB3_LOGDIR"):
        return
    folder = tempfile.mkdtemp(prefix="rlfast_bench_sb3_log_")
    os.environ["SB3_LOGDIR"] = folder
    atexit.register(shutil.rmtree, folder, ignore_errors=True)


def child_env() -> dict:
    """This environment with the repository on PYTHONPATH (for a benchmark's child process)."""
    return dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (REPO_ROOT, os.environ.get("PYTHONPATH")) if p))


def stop_group(proc: subprocess.Popen, grace: float = 20.0) -> None:
    """Stop a child started in its own session as Ctrl-C would (SIGINT to its group, so that
    rlfast's runners shut their workers down), then SIGKILL whatever is left."""
    for sig, wait in ((signal.SIGINT, grace), (signal.SIGKILL, 10.0)):
        if proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            pass


def preload_child_modules() -> None:
    """Import what the rlfast contenders import, in this process, before a smoke test
    (``--quick``) forks them: each forked child then starts with them. torch._dynamo, which
    Adam's constructor imports, alone costs a few CPU seconds per interpreter."""
    import torch._dynamo  # noqa: F401

    import rlfast.envs.atari.atari_env  # noqa: F401
    import rlfast.experiments.presets  # noqa: F401
    import rlfast.runners  # noqa: F401
    import rlfast.utils.logging  # noqa: F401


def _forked_body(body, out_fd: int, err_fd: int) -> None:
    """A forked contender: its own process group, its output into the parent's files."""
    os.setsid()
    os.dup2(out_fd, 1)
    os.dup2(err_fd, 2)
    import sys
    try:
        body()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()


def run_forked(body, timeout_s: float) -> tuple[int | None, str, str]:
    """(exit status, or None once killed on timeout; stdout; stderr) of ``body()`` run in a
    fork of this process, in its own process group (killed whole on timeout). The smoke
    tests' way to run contenders: a fork starts with the parent's imports, where a new
    interpreter pays them again; the benchmarks proper start new interpreters."""
    import multiprocessing
    import sys

    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        sys.stdout.flush()
        sys.stderr.flush()
        child = multiprocessing.get_context("fork").Process(
            target=_forked_body, args=(body, out.fileno(), err.fileno()))
        child.start()
        child.join(timeout_s)
        returncode = child.exitcode
        if returncode is None:
            try:
                os.killpg(child.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            child.join()
        out.seek(0)
        err.seek(0)
        return returncode, out.read(), err.read()
