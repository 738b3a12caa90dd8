"""What every benchmark in this folder shares, so that all of them measure and report alike:
the machine they ran on, contenders interleaved over rounds, medians and ratios, Markdown
tables and JSON records, child processes run, timed out and stopped whole, and the
measurement window that leaves start-up and the first updates untimed.

A benchmark imports it as ``_common`` with its own folder on ``sys.path`` (a script's folder
is there when it runs; a module loaded by path inserts it first).
"""
from __future__ import annotations

import atexit
import json
import math
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import IO, Any

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The prefix of the one line of figures a benchmark's child prints (print_result).
RESULT_TAG = "RLFAST_BENCH_RESULT "


# ---- the machine ----------------------------------------------------------------------------

def cpu_model() -> str:
    """The CPU's model name (from /proc/cpuinfo; the platform's processor name elsewhere)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def load_average() -> float:
    """The machine's 1-minute load average (NaN where the system has none): other load on a
    shared machine is what makes wall-clock figures drift."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return math.nan


def commit() -> str:
    """The short commit of the checkout measured (``-dirty`` with uncommitted changes to
    tracked files), or ``"unknown"`` outside a git checkout."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True,
                              timeout=30, check=True).stdout.strip()
    try:
        head = git("rev-parse", "--short", "HEAD")
        dirty = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return head + ("-dirty" if dirty else "")


def _hardware() -> dict:
    """What does not change while a benchmark runs: CPU, cores, GPU, Python, torch, OS."""
    import torch
    return dict(cpu=cpu_model(), cores=os.cpu_count(),
                usable_cores=len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                else os.cpu_count(),
                gpu=torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU",
                python=platform.python_version(), torch=torch.__version__,
                os=f"{platform.system()} {platform.release()}")


def machine() -> str:
    """One line naming the CPU, core count, GPU (if any), Python and torch versions and the
    OS: the line every benchmark prints first and records beside its figures."""
    h = _hardware()
    return (f"{h['cpu']}, {h['cores']} cores, {h['gpu']}, Python {h['python']}, "
            f"torch {h['torch']}, {h['os']}")


def machine_facts() -> dict:
    """The machine as a record: ``_hardware``'s fields, the cores this process may use, the
    load averages (1, 5, 15 minutes) now and the commit measured."""
    try:
        loads = list(os.getloadavg())
    except (AttributeError, OSError):
        loads = None
    return dict(_hardware(), load_average=loads, commit=commit())


# ---- contenders over rounds -----------------------------------------------------------------

def interleave(contenders: Iterable, rounds: int) -> Iterator[tuple[int, list]]:
    """``(round index, the contenders in that round's order)`` for ``rounds`` rounds: the given
    order in even rounds, reversed in odd ones, so that a drift in the machine's load (a
    neighbour starting, a core warming) falls on every contender alike."""
    order = list(contenders)
    for r in range(rounds):
        yield r, (order if r % 2 == 0 else order[::-1])


# ---- medians and ratios ---------------------------------------------------------------------

def median(values: Iterable[float]) -> float:
    """The median of ``values``; NaN when there are none."""
    values = list(values)
    return statistics.median(values) if values else math.nan


def medians(runs: Sequence[dict], keys: Iterable[str]) -> dict[str, float]:
    """For each of ``keys``, the median over ``runs`` (one dict of figures per round)."""
    return {key: median(run[key] for run in runs) for key in keys}


def paired_ratios(numerators: Sequence[float], denominators: Sequence[float]) -> list[float]:
    """Round by round, one contender's figure over another's: the two ran back to back, so
    their ratio cancels the drift that the ratio of medians keeps."""
    return [a / b for a, b in zip(numerators, denominators)]


def ratio_cell(value: float | None, base: float | None) -> str:
    """``value / base`` as a table cell (``"1.23x"``), ``"n/a"`` without both."""
    if value is None or not base:
        return "n/a"
    return f"{value / base:.2f}x"


# ---- reports --------------------------------------------------------------------------------

def number(value: float | None, digits: int = 0) -> str:
    """A figure as a table cell with thousands separators; ``"-"`` for None or NaN."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:,.{digits}f}"


def verdict(ok: bool | None) -> str:
    """An acceptance check as a word: PASS, FAIL, or "not measured" (None)."""
    return "not measured" if ok is None else ("PASS" if ok else "FAIL")


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[Any]], align: str = "",
                   pad: bool = False) -> str:
    """A Markdown table as text: the header, the rule, one line a row of ``str(cell)``. The
    rule has one letter of ``align`` a column: ``r`` right (``---:``), anything else or nothing
    left (``---``). ``pad`` widens every column to its longest cell instead (a table that is
    also read as plain text)."""
    lines = [[str(cell) for cell in header]] + [[str(cell) for cell in row] for row in rows]
    if pad:
        widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]))]
        text = ["| " + " | ".join(c.ljust(w) for c, w in zip(line, widths)) + " |"
                for line in lines]
        text.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
        return "\n".join(text)
    rule = "|" + "|".join("---:" if a == "r" else "---"
                          for a in align.ljust(len(lines[0]), "l")) + "|"
    text = ["| " + " | ".join(line) + " |" for line in lines]
    return "\n".join(text[:1] + [rule] + text[1:])


def write_json(path: str, record: dict, **dump_kwargs: Any) -> None:
    """``record`` as JSON at ``path`` (indented by 1 unless ``dump_kwargs`` say otherwise),
    with ``machine`` (the line of ``machine()``) and ``facts`` (``machine_facts()``) first
    where it has none of its own: every record says where and at which commit it was
    measured."""
    full = dict(machine=record["machine"] if "machine" in record else machine(),
                facts=record["facts"] if "facts" in record else machine_facts())
    full.update((k, v) for k, v in record.items() if k not in full)
    dump_kwargs.setdefault("indent", 1)
    with open(path, "w") as f:
        json.dump(full, f, **dump_kwargs)


# ---- child processes ------------------------------------------------------------------------

def child_env(**extra: str) -> dict:
    """This environment with the repository on PYTHONPATH (and ``extra`` variables): what a
    benchmark's child process runs with."""
    return dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (REPO_ROOT, os.environ.get("PYTHONPATH")) if p), **extra)


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


def run_process(cmd: list[str], timeout: float | None = None, *, env: dict | None = None,
              cwd: str | None = None, output: IO | None = None,
              grace: float = 20.0) -> tuple[int | None, str, str]:
    """Run ``cmd`` in its own session (process group), waiting at most ``timeout`` seconds:
    (exit status, or None when the timeout stopped it; stdout; stderr), both "" when they went
    to the open file ``output``. A timeout, Ctrl-C or any other exception while it runs stops
    its whole group (``stop_group``, SIGKILL after ``grace`` s): no process of the run
    outlives it. Exceptions other than the timeout are raised again. ``env`` defaults to
    ``child_env()``."""
    streams = (dict(stdout=output, stderr=subprocess.STDOUT) if output is not None
               else dict(stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    proc = subprocess.Popen(cmd, text=True, env=env if env is not None else child_env(),
                            cwd=cwd, start_new_session=True, **streams)
    try:
        out, err = proc.communicate(timeout=timeout)
    except BaseException as error:
        stop_group(proc, grace)
        out, err = proc.communicate()
        if not isinstance(error, subprocess.TimeoutExpired):
            raise
        return None, out or "", err or ""
    return proc.returncode, out or "", err or ""


def print_result(figures: dict) -> None:
    """A child's figures, as the one line ``parse_result`` reads."""
    print(RESULT_TAG + json.dumps(figures), flush=True)


def parse_result(name: str, returncode: int | None, out: str, err: str = "",
                 tag: str | None = RESULT_TAG) -> dict:
    """The figures child ``name`` printed: its last stdout line starting with ``tag`` (None:
    its last stdout line), parsed as JSON. RuntimeError naming the child and quoting the tail
    of its output when it failed, was stopped (``returncode`` None) or printed none."""
    lines = [line for line in out.splitlines()
             if line.strip() and (tag is None or line.startswith(tag))]
    if returncode != 0 or not lines:
        why = "was stopped" if returncode is None else f"exit {returncode}"
        raise RuntimeError(f"{name} failed ({why}):\n{(out + err)[-3000:]}")
    return json.loads(lines[-1][len(tag or ""):])


def preload_child_modules() -> None:
    """Import what the rlfast contenders import, in this process, before a smoke test
    (``--quick``) forks them: each forked child then starts with them. torch._dynamo, which
    Adam's constructor imports, alone costs a few CPU seconds per interpreter."""
    import torch._dynamo  # noqa: F401

    import rlfast.envs.atari.atari_env  # noqa: F401
    import rlfast.experiments.presets  # noqa: F401
    import rlfast.runners  # noqa: F401
    import rlfast.utils.logging  # noqa: F401


def _forked_body(body: Callable[[], None], out_fd: int, err_fd: int) -> None:
    """A forked contender: its own process group, its output into the parent's files."""
    os.setsid()
    os.dup2(out_fd, 1)
    os.dup2(err_fd, 2)
    try:
        body()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()


def run_forked(body: Callable[[], None], timeout_s: float) -> tuple[int | None, str, str]:
    """(exit status, or None once killed on timeout; stdout; stderr) of ``body()`` run in a
    fork of this process, in its own process group (killed whole on timeout). The smoke
    tests' way to run contenders: a fork starts with the parent's imports, where a new
    interpreter pays them again; the benchmarks proper start new interpreters."""
    import multiprocessing

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


def sb3_version() -> str | None:
    """Stable-Baselines3's version; None where it is not installed, after a line saying that
    the comparison times rlfast alone."""
    try:
        import stable_baselines3
    except ImportError:
        print("stable-baselines3 is not installed: timing rlfast only "
              "(pip install stable-baselines3 to compare).")
        return None
    return stable_baselines3.__version__


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


# ---- timing ---------------------------------------------------------------------------------

def rate(step: Callable[[], Any], items_per_call: int, seconds: float) -> float:
    """Items per second of repeated ``step()`` over about ``seconds`` (after one warm-up)."""
    step()
    calls, start = 0, time.perf_counter()
    while True:
        step()
        calls += 1
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return calls * items_per_call / elapsed


def machine_busy_seconds() -> float:
    """CPU seconds all cores of the machine have been busy (idle and I/O wait left out):
    over a window, this less a run's own CPU time is the load of everything else."""
    import psutil

    t = psutil.cpu_times()
    return sum(t) - t.idle - getattr(t, "iowait", 0.0)


class Window:
    """The measurement window of a run. Its clock starts at the first ``observe`` that sees at
    least ``settle`` gradient updates (0: the first call); it opens at the first call
    ``warmup`` s later and closes at the first call ``seconds`` after it opened, so that
    start-up, compilation and the first updates are never timed. ``observe(steps, updates)``
    takes the cumulative env steps and updates at each iteration boundary and returns True once
    the window is closed; ``point`` records what a boundary shows (a subclass adds figures)."""

    def __init__(self, seconds: float, warmup: float, settle: int = 1):
        self.seconds, self.warmup, self.settle = seconds, warmup, settle
        self.clock: float | None = None
        self.start: dict | None = None
        self.end: dict | None = None

    def point(self, steps: int, updates: int) -> dict:
        """What a boundary shows: the clock, the wall-clock time, env steps and updates."""
        return dict(t=time.perf_counter(), wall=time.time(), steps=steps, updates=updates)

    def observe(self, steps: int, updates: int) -> bool:
        """Called at each boundary with the cumulative env steps and updates; True once the
        window is closed (the run may stop)."""
        if self.end is not None:
            return True
        now = time.perf_counter()
        if self.clock is None:
            if updates >= self.settle:
                self.clock = now
            return False
        if self.start is None:
            if now - self.clock >= self.warmup:
                self.start = self.point(steps, updates)
            return False
        if now - self.start["t"] >= self.seconds:
            self.end = self.point(steps, updates)
            return True
        return False

    def result(self) -> dict:
        """Seconds, wall-clock start and end, env steps and updates of the window, and their
        rates (``env_sps``, ``ups``)."""
        if self.end is None:
            raise RuntimeError("the run ended before its measurement window closed")
        a, b = self.start, self.end
        wall = b["t"] - a["t"]
        steps, updates = b["steps"] - a["steps"], b["updates"] - a["updates"]
        return dict(window_s=wall, t_start=a["wall"], t_end=b["wall"], steps=steps,
                    updates=updates, env_sps=steps / wall, ups=updates / wall)
