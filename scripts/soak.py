#!/usr/bin/env python
"""Soak test: does a long ``rlfast train`` run leak memory, file descriptors, shared memory or
speed?

Runs one or both of these jobs concurrently, each as its own ``python -m rlfast.cli train``
subprocess (its own session / process group), for ``--minutes`` (default 30):

* ``ppo``: PPO on CartPole-v1 with the CPU sampler;
* ``dqn``: DQN on ``atari:pong`` with the CPU sampler.

Both use the rlfast presets with a few values shrunk (``--set``) so they fit a small shared
machine: a few environments each, a cheap evaluation (1-2 eval environments, at most 1000
steps), log intervals that give a progress.csv row roughly every 20-40 s, and for DQN a small
replay buffer and a short pre-learning phase. With ``--cpus-per-job N`` (default 1) job ``i`` is
pinned to its own N cores through an affinity code (``<i>slt_<ncpu>cpu_0gpu_0hto_<N>cpr``:
one sampler worker per core); ``--cpus-per-job 0`` leaves the affinity to rlfast.

Every ``--sample-s`` seconds (default 60) it records per job: the RSS of the master and of
its workers (all descendants, summed), open file descriptors (master + workers), shared memory
segments the job holds (distinct ``/dev/shm/...`` files or memfds mapped in or open by any of
its processes, deleted ones included -- ``multiprocessing.RawArray`` unlinks its file at once,
so only ``/proc/<pid>/maps`` shows it), the global ``/dev/shm`` entry count (information only:
other users of the machine change it), and the training speed from the job's progress.csv:
the CumSteps delta over the CumTime delta (training time, evaluation excluded) of the rows
logged since the previous sample (blank when no new row arrived).

Warm-up: the first 5 minutes or 1/6 of the run, whichever is smaller (of the actual length when
the soak is interrupted), or exactly ``--warmup-minutes``. Only samples after it are judged:

* RSS growth after the warm-up < ``--max-rss-growth`` (5%), for the master and for the
  workers' sum separately: first post-warm-up sample to the last, or in runs with 8+
  post-warm-up samples the mean of the first 2-3 to the mean of the last 2-3 (the master's
  RSS wobbles by a few percent from sample to sample as the allocator takes and returns
  memory);
* every post-warm-up steps/s within +-``--speed-tol`` (30%) of their median (a noisy, shared
  machine; the spread is printed);
* no growth of open fds or of the job's shared-memory segments (last <= first), a constant
  number of worker processes, and the job still alive at the end.

DQN replay: its buffer fills as the run goes and the master's RSS grows with it (frame-buffer
pages, ~7 KB per transition, are touched as they are written), so ``--dqn-replay`` (default
5_000 transitions, about 35 MB of frames) is chosen to fill well inside the default 5-minute
warm-up even on a busy machine: 2_000 steps before learning at ~400-1000 steps/s, then 25-70
steps/s on one slow, shared core while learning, so about 1-2.5 minutes (learning also adds
the optimizer state and autograd buffers once, at the first update). In a short run
(``--minutes 3``: a 30 s warm-up) the replay is still filling after the warm-up, so the DQN RSS
check can fail there on a busy machine; it is meant for runs of 15+ minutes. The DQN master's
RSS also wobbles by ~20-30 MB (~5%) between samples, hence the means above. Both jobs start
within ~10-20 s (``atari:pong`` included); the first PPO row comes after ~30-60 s.

Samples go to ``--out`` (default ``data/soak/<timestamp>.csv``, written as the run goes). At
the end, or on Ctrl-C / SIGTERM / SIGHUP of the soak, the jobs are stopped (SIGTERM to the
master, which ``rlfast train`` turns into a clean shutdown of its sampler; after 30 s SIGTERM,
then SIGKILL, to whatever of the job is left), and a table per job and the verdict are
printed. Each job also gets SIGTERM from the kernel should the soak die without cleaning up
(Linux parent-death signal). Exit status: 0 when every job passes, 1 otherwise.

    python scripts/soak.py                         # 30 minutes, ppo and dqn
    python scripts/soak.py --minutes 3 --sample-s 20 --jobs ppo
"""
from __future__ import annotations

import argparse
import csv
import datetime
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import psutil

REPO = Path(__file__).resolve().parents[1]
MB = 1024.0 * 1024.0
DEFAULT_WARMUP_S = 5 * 60.0
HUGE_STEPS = 10 ** 12  # "forever": the soak stops the job, not its step budget

# Preset values the soak overrides per job ({replay} is filled from --dqn-replay).
JOBS: dict[str, dict[str, Any]] = {
    "ppo": dict(algo="ppo", env="CartPole-v1", n_envs=4, sets=[
        "runner.log_interval_steps=204800",  # ~8k steps/s on one core: a row every ~25 s
        "sampler.eval_n_envs=2", "sampler.eval_max_steps=1000",
        "sampler.eval_max_trajectories=2"]),
    "dqn": dict(algo="dqn", env="atari:pong", n_envs=4, sets=[
        "algo.replay_size={replay}", "algo.min_steps_learn=2000",
        "runner.log_interval_steps=2000",  # ~70 steps/s while learning: a row every ~30 s
        "sampler.eval_n_envs=1", "sampler.eval_max_steps=1000",
        "sampler.eval_max_trajectories=1"]),
}

CSV_FIELDS = ["job", "t_s", "phase", "alive", "master_pid", "n_workers", "rss_master_mb",
              "rss_workers_mb", "fds_master", "fds_workers", "fds", "shm_job", "shm_global",
              "cum_steps", "progress_rows", "steps_per_s"]


# ---- commands -----------------------------------------------------------------------------
def affinity_code(slot: int, n_cpu: int, cpus_per_job: int) -> str:
    """The rlfast affinity code pinning job ``slot`` to cores
    ``[slot * cpus_per_job, (slot + 1) * cpus_per_job)`` of an ``n_cpu``-core machine."""
    return f"{slot}slt_{n_cpu}cpu_0gpu_0hto_{cpus_per_job}cpr"


def job_command(name: str, log_dir: str, *, replay_size: int, affinity: str | None,
                extra_sets: Sequence[str] = (), python: str = sys.executable) -> list[str]:
    """The ``python -m rlfast.cli train ...`` command line of soak job ``name``."""
    spec = JOBS[name]
    cmd = [python, "-m", "rlfast.cli", "train", spec["algo"], spec["env"], "--sampler", "cpu",
           "--steps", str(HUGE_STEPS), "--n-envs", str(spec["n_envs"]), "--log-dir", log_dir,
           "--no-progress", "--snapshot-mode", "last"]
    if affinity:
        cmd += ["--affinity", affinity]
    for s in list(spec["sets"]) + list(extra_sets):
        cmd += ["--set", s.format(replay=replay_size)]
    return cmd


# ---- measurements -------------------------------------------------------------------------
def shm_segments(pid: int) -> set[str]:
    """Shared-memory segments process ``pid`` maps or holds open: ``/dev/shm/...`` paths
    (`` (deleted)`` stripped) and memfds. Empty when the process is gone or unreadable."""
    found: set[str] = set()
    try:
        with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as f:
            for line in f:
                parts = line.split(None, 5)
                if len(parts) == 6:
                    path = parts[5].strip()
                    if path.startswith("/dev/shm/") or path.startswith("/memfd:"):
                        found.add(path.removesuffix(" (deleted)"))
    except OSError:
        pass
    try:
        fd_dir = f"/proc/{pid}/fd"
        for fd in os.listdir(fd_dir):
            try:
                target = os.readlink(os.path.join(fd_dir, fd))
            except OSError:
                continue
            if target.startswith("/dev/shm/") or target.startswith("/memfd:"):
                found.add(target.removesuffix(" (deleted)"))
    except OSError:
        pass
    return found


def global_shm_count() -> int:
    """Entries in /dev/shm (-1 where there is none)."""
    try:
        return len(os.listdir("/dev/shm"))
    except OSError:
        return -1


def _num_fds(proc: psutil.Process) -> int:
    try:
        return proc.num_fds()
    except (psutil.Error, AttributeError):
        try:
            return len(proc.open_files())
        except psutil.Error:
            return 0


def process_tree_stats(pid: int) -> dict[str, Any] | None:
    """RSS (MB), fds and shared-memory segments of process ``pid`` and of all its descendants
    (the "workers"); None when ``pid`` is gone."""
    try:
        master = psutil.Process(pid)
        rss_master = master.memory_info().rss / MB
        fds_master = _num_fds(master)
        children = master.children(recursive=True)
    except psutil.Error:
        return None
    rss_workers = 0.0
    fds_workers = 0
    n_workers = 0
    shm = shm_segments(pid)
    for child in children:
        try:
            rss_workers += child.memory_info().rss / MB
            fds_workers += _num_fds(child)
        except psutil.Error:
            continue  # exited between listing and reading
        n_workers += 1
        shm |= shm_segments(child.pid)
    return dict(rss_master_mb=rss_master, rss_workers_mb=rss_workers, n_workers=n_workers,
                fds_master=fds_master, fds_workers=fds_workers, fds=fds_master + fds_workers,
                shm_job=len(shm), children=children)


def _column(fieldnames: Sequence[str], suffix: str) -> str | None:
    """The progress.csv column named ``suffix`` (with any prefix, e.g. ``Diagnostics/``)."""
    for name in fieldnames:
        if name == suffix or name.endswith("/" + suffix):
            return name
    return None


def read_progress(path: str | os.PathLike) -> list[tuple[float, float]]:
    """(CumSteps, CumTime seconds) of every complete progress.csv row with training time > 0
    (the pre-training evaluation row has none); [] when the file is missing or empty."""
    try:
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            steps_col = _column(reader.fieldnames or [], "CumSteps")
            time_col = _column(reader.fieldnames or [], "CumTime (s)")
            if steps_col is None or time_col is None:
                return []
            rows = []
            for row in reader:
                try:
                    steps, secs = float(row[steps_col]), float(row[time_col])
                except (TypeError, ValueError, KeyError):
                    continue  # a row being written
                if secs > 0 and math.isfinite(steps) and math.isfinite(secs):
                    rows.append((steps, secs))
            return rows
    except OSError:
        return []


def window_rate(rows: Sequence[tuple[float, float]], seen: int) -> float:
    """Steps per second of training over the rows after the first ``seen`` rows: the CumSteps
    delta over the CumTime delta from the last row already seen (from zero when none was).
    NaN when no new row arrived."""
    if len(rows) <= seen:
        return float("nan")
    steps, secs = rows[-1]
    prev_steps, prev_secs = rows[seen - 1] if seen > 0 else (0.0, 0.0)
    if secs <= prev_secs:
        return float("nan")
    return (steps - prev_steps) / (secs - prev_secs)


# ---- one job ------------------------------------------------------------------------------
@dataclass
class Job:
    """One soak job: a subprocess in its own session, its log dir and its samples."""

    name: str
    cmd: list[str]
    log_dir: str
    proc: subprocess.Popen | None = None
    samples: list[dict] = field(default_factory=list)
    seen: dict[int, psutil.Process] = field(default_factory=dict)  # every descendant met
    rows_seen: int = 0
    returncode: int | None = None
    ended_early: bool = False
    stop_note: str = ""

    @property
    def output_path(self) -> str:
        return os.path.join(self.log_dir, "output.txt")

    def start(self) -> None:
        os.makedirs(self.log_dir, exist_ok=True)
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        with open(self.output_path, "w") as out:
            self.proc = subprocess.Popen(self.cmd, stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, cwd=str(REPO), env=env,
                                         start_new_session=True, preexec_fn=_child_setup)
        try:
            self.seen[self.proc.pid] = psutil.Process(self.proc.pid)
        except psutil.Error:
            pass

    def sample(self, t_s: float, phase: str, shm_global: int) -> dict:
        """Measure the job now; the sample is kept and returned."""
        assert self.proc is not None
        alive = self.proc.poll() is None
        stats = process_tree_stats(self.proc.pid) if alive else None
        if stats is not None:
            for child in stats.pop("children"):
                self.seen.setdefault(child.pid, child)
        elif alive:
            alive = False
        if not alive and self.returncode is None:
            self.returncode = self.proc.poll()
            self.ended_early = True
        rows = read_progress(os.path.join(self.log_dir, "progress.csv"))
        rate = window_rate(rows, self.rows_seen)
        self.rows_seen = max(self.rows_seen, len(rows))
        nan = float("nan")
        sample = dict(job=self.name, t_s=t_s, phase=phase, alive=int(alive),
                      master_pid=self.proc.pid,
                      n_workers=stats["n_workers"] if stats else 0,
                      rss_master_mb=stats["rss_master_mb"] if stats else nan,
                      rss_workers_mb=stats["rss_workers_mb"] if stats else nan,
                      fds_master=stats["fds_master"] if stats else -1,
                      fds_workers=stats["fds_workers"] if stats else -1,
                      fds=stats["fds"] if stats else -1,
                      shm_job=stats["shm_job"] if stats else -1, shm_global=shm_global,
                      cum_steps=int(rows[-1][0]) if rows else 0, progress_rows=len(rows),
                      steps_per_s=rate)
        self.samples.append(sample)
        return sample

    def stop(self, grace_s: float = 30.0, term_s: float = 5.0) -> None:
        """Stop the job and every process it started: SIGTERM to the master (``rlfast
        train`` logs the interruption, stops its workers and exits with 143), then after
        ``grace_s`` SIGTERM to whatever of the job is left (e.g. workers of a master that
        died), then SIGKILL, process group included. Idempotent."""
        if self.proc is None or self.stop_note:
            return
        began = time.monotonic()
        how = "nothing (it had already exited)"
        if self.proc.poll() is None:
            how = "SIGTERM to the master"
            try:
                for child in psutil.Process(self.proc.pid).children(recursive=True):
                    self.seen.setdefault(child.pid, child)
            except psutil.Error:
                pass
            try:
                self.proc.send_signal(signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                pass
        left = [p for p in self.seen.values() if _alive(p)]
        for sig, wait_s in ((signal.SIGTERM, term_s), (signal.SIGKILL, term_s)):
            if not left:
                break
            how += f", then {signal.Signals(sig).name} to {len(left)} process(es)"
            for p in left:
                try:
                    p.send_signal(sig)
                except psutil.Error:
                    pass
            self._signal_group(sig)
            left = _wait_gone(left, wait_s)
        if self.proc.poll() is None:
            self.proc.kill()
        rc = self.proc.wait()
        if self.returncode is None:
            self.returncode = rc
        self.stop_note = f"stopped by {how} in {time.monotonic() - began:.1f} s (exit code {rc})"

    def _signal_group(self, sig: int) -> None:
        """Signal the job's process group (its master's pid: started in a new session), while
        a process of the job is known to be in it."""
        assert self.proc is not None
        if not any(_alive(p) for p in self.seen.values()):
            return
        try:
            os.killpg(self.proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def survivors(self) -> list[int]:
        """Pids of this job's processes still running."""
        return [pid for pid, p in self.seen.items() if _alive(p)]

    def output_tail(self, n: int = 15) -> str:
        try:
            with open(self.output_path, errors="replace") as f:
                return "".join(f.readlines()[-n:])
        except OSError:
            return ""


def _child_setup() -> None:
    """In a job's process before exec: default SIGINT / SIGTERM dispositions (a shell that
    starts the soak in the background makes them ignored, and children inherit that), and on
    Linux SIGTERM when the soak itself dies, even by SIGKILL, so that no job outlives it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if sys.platform.startswith("linux"):
        try:
            import ctypes
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, int(signal.SIGTERM), 0, 0, 0)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass


def _wait_gone(procs: list[psutil.Process], timeout_s: float) -> list[psutil.Process]:
    """Wait up to ``timeout_s`` for ``procs`` to end; return those still running. A zombie
    counts as ended (it holds no memory or files; its parent or init reaps it)."""
    deadline = time.monotonic() + timeout_s
    left = [p for p in procs if _alive(p)]
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = [p for p in left if _alive(p)]
    return left


def _alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


# ---- verdict ------------------------------------------------------------------------------
@dataclass
class Limits:
    max_rss_growth: float = 0.05
    speed_tol: float = 0.30


def warmup_seconds(duration_s: float, warmup_minutes: float | None = None) -> float:
    """The warm-up: ``warmup_minutes`` when given, else 5 minutes or 1/6 of the run,
    whichever is smaller."""
    if warmup_minutes is not None:
        return warmup_minutes * 60.0
    return min(DEFAULT_WARMUP_S, duration_s / 6.0)


def _rss(sample: dict, key: str) -> float:
    """RSS ``key`` of a sample in MB; ``"total"``: master plus workers."""
    if key == "total":
        return sample["rss_master_mb"] + sample["rss_workers_mb"]
    return sample[key]


def _growth(first: float, last: float) -> float:
    return (last - first) / first if first > 0 else float("nan")


def judge(samples: Sequence[dict], warmup_s: float, limits: Limits,
          ended_early: bool = False) -> list[tuple[str, bool, str]]:
    """The checks of one job: (name, passed, detail) for each target."""
    post = [s for s in samples if s["t_s"] >= warmup_s and s["alive"]]
    checks: list[tuple[str, bool, str]] = []
    if ended_early:
        checks.append(("alive", False, "the job exited before the soak ended"))
    if len(post) < 2:
        checks.append(("samples", False, f"{len(post)} post-warm-up sample(s); need >= 2 "
                                         f"(run longer or sample more often)"))
        return checks
    first, last = post[0], post[-1]
    # RSS: the mean of the first k post-warm-up samples against that of the last k (k = 1 in
    # short runs, up to 3 in long ones): the master's RSS wobbles by some percent as the
    # allocator takes and returns memory, and a leak shows in the means as well.
    k = max(1, min(3, len(post) // 4))
    what = f"mean of first/last {k} samples" if k > 1 else "first -> last sample"
    for key, label in (("rss_master_mb", "RSS master"), ("rss_workers_mb", "RSS workers"),
                       ("total", "RSS total")):
        a = statistics.fmean(_rss(s, key) for s in post[:k])
        b = statistics.fmean(_rss(s, key) for s in post[-k:])
        g = _growth(a, b)
        info = key == "total"  # judged per part; the total is shown for reference
        ok = info or not (g >= limits.max_rss_growth)  # NaN (no workers) passes
        limit = "info" if info else f"limit +{limits.max_rss_growth * 100:.0f}%"
        checks.append((label, ok, f"{a:.1f} -> {b:.1f} MB ({g * 100:+.1f}%, {limit}; {what})"))
    rates = [s["steps_per_s"] for s in post if math.isfinite(s["steps_per_s"])]
    if not rates:
        checks.append(("steps/s", False, "no progress.csv row after the warm-up"))
    else:
        med = statistics.median(rates)
        lo, hi = min(rates) / med - 1.0, max(rates) / med - 1.0
        ok = all(abs(r / med - 1.0) <= limits.speed_tol for r in rates)
        checks.append(("steps/s", ok, f"median {med:.1f}, min {lo * 100:+.1f}%, max "
                                      f"{hi * 100:+.1f}% over {len(rates)} sample(s) "
                                      f"(limit +-{limits.speed_tol * 100:.0f}%)"))
    for key, label in (("fds", "open fds"), ("shm_job", "shm segments")):
        peak = max(s[key] for s in post)
        checks.append((label, last[key] <= first[key],
                       f"{first[key]} -> {last[key]} (max {peak})"))
    workers = sorted({s["n_workers"] for s in post})
    checks.append(("workers", len(workers) == 1, f"worker processes: {workers}"))
    g_first, g_last = first["shm_global"], last["shm_global"]
    checks.append(("/dev/shm", True, f"global entries {g_first} -> {g_last} (info: shared "
                                     f"with other users of the machine)"))
    return checks


def _fmt_time(t_s: float) -> str:
    return f"{int(t_s) // 60:d}:{int(t_s) % 60:02d}"


def _fmt(value: float, spec: str) -> str:
    return format(value, spec) if isinstance(value, (int, float)) and math.isfinite(value) else "-"


def format_table(samples: Sequence[dict], warmup_s: float) -> str:
    """The samples of one job as a text table (``w`` marks warm-up samples)."""
    head = (f"{'time':>7} {'':1} {'RSS master':>11} {'RSS workers':>12} {'n':>2} {'fds':>5} "
            f"{'shm':>4} {'shm(all)':>8} {'steps':>11} {'steps/s':>9}")
    lines = [head, "-" * len(head)]
    for s in samples:
        mark = "w" if s["t_s"] < warmup_s else ("x" if not s["alive"] else "")
        lines.append(f"{_fmt_time(s['t_s']):>7} {mark:1} {_fmt(s['rss_master_mb'], '.1f'):>8} MB "
                     f"{_fmt(s['rss_workers_mb'], '.1f'):>9} MB {s['n_workers']:>2} "
                     f"{s['fds']:>5} {s['shm_job']:>4} {s['shm_global']:>8} "
                     f"{s['cum_steps']:>11} {_fmt(s['steps_per_s'], '.1f'):>9}")
    return "\n".join(lines)


def report(jobs: Sequence[Job], warmup_s: float, limits: Limits,
           out: Callable[[str], None] = print) -> bool:
    """Print each job's table and checks; True when every job passes."""
    all_ok = True
    for job in jobs:
        out("")
        out(f"== {job.name}: python {subprocess.list2cmdline(job.cmd[1:])}")
        out(f"   (warm-up: first {warmup_s:.0f} s, marked w; RSS in MB; fds and shm summed "
            f"over master + workers; shm(all): /dev/shm entries)")
        out(format_table(job.samples, warmup_s))
        checks = judge(job.samples, warmup_s, limits, ended_early=job.ended_early)
        for name, ok, detail in checks:
            out(f"   {'PASS' if ok else 'FAIL'}  {name:<13} {detail}")
        ok = all(c[1] for c in checks)
        if job.stop_note:
            out(f"   {job.stop_note}")
        if job.ended_early:
            out(f"   exit code {job.returncode}; last output:\n{job.output_tail()}")
        out(f"   => {job.name}: {'PASS' if ok else 'FAIL'}")
        all_ok &= ok
    return all_ok


# ---- main ---------------------------------------------------------------------------------
class Interrupted(Exception):
    """SIGTERM / SIGHUP received."""


def _raise_interrupted(signum: int, frame: Any) -> None:
    raise Interrupted(signal.Signals(signum).name)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--minutes", type=float, default=30.0, help="soak length (default 30)")
    p.add_argument("--sample-s", type=float, default=60.0,
                   help="seconds between samples (default 60)")
    p.add_argument("--jobs", default="ppo,dqn", help=f"comma-separated from {sorted(JOBS)}")
    p.add_argument("--warmup-minutes", type=float, default=None,
                   help="warm-up length (default: 5 minutes or 1/6 of the run, whichever is "
                        "smaller)")
    p.add_argument("--cpus-per-job", type=int, default=1,
                   help="cores pinned per job, one sampler worker each (0: rlfast's default "
                        "affinity, every core)")
    p.add_argument("--dqn-replay", type=int, default=5_000,
                   help="DQN replay size; should fill inside the warm-up (default 5000)")
    p.add_argument("--ppo-set", action="append", default=[], metavar="KEY=VALUE",
                   help="extra --set for the ppo job (after the soak's own)")
    p.add_argument("--dqn-set", action="append", default=[], metavar="KEY=VALUE",
                   help="extra --set for the dqn job (after the soak's own)")
    p.add_argument("--max-rss-growth", type=float, default=5.0,
                   help="allowed RSS growth after warm-up, percent (default 5)")
    p.add_argument("--speed-tol", type=float, default=30.0,
                   help="allowed deviation of steps/s from the median, percent (default 30)")
    p.add_argument("--out", default=None,
                   help="samples CSV (default data/soak/<timestamp>.csv)")
    p.add_argument("--keep-logs", action="store_true",
                   help="keep the jobs' log dirs (progress.csv, output.txt) instead of deleting")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    names = [n.strip() for n in args.jobs.split(",") if n.strip()]
    unknown = [n for n in names if n not in JOBS]
    if not names or unknown or len(set(names)) != len(names):
        print(f"soak: --jobs must name distinct jobs from {sorted(JOBS)}; got {args.jobs!r}",
              file=sys.stderr)
        return 2
    n_cpu = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    if args.cpus_per_job and (n_cpu % args.cpus_per_job or
                              len(names) * args.cpus_per_job > n_cpu):
        print(f"soak: {len(names)} job(s) x {args.cpus_per_job} cores does not fit {n_cpu} "
              f"cores (use --cpus-per-job 0 to share them)", file=sys.stderr)
        return 2
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    out_path = Path(args.out) if args.out else REPO / "data" / "soak" / f"{stamp}.csv"
    out_path.parent.mkdir(parents=True, exist_ok=True)
    log_root = tempfile.mkdtemp(prefix=f"rlfast-soak-{stamp}-")
    limits = Limits(max_rss_growth=args.max_rss_growth / 100.0, speed_tol=args.speed_tol / 100.0)
    duration_s = args.minutes * 60.0
    extra = dict(ppo=args.ppo_set, dqn=args.dqn_set)
    jobs = [Job(name, job_command(name, os.path.join(log_root, name),
                                  replay_size=args.dqn_replay,
                                  affinity=(affinity_code(i, n_cpu, args.cpus_per_job)
                                            if args.cpus_per_job else None),
                                  extra_sets=extra[name]),
                os.path.join(log_root, name))
            for i, name in enumerate(names)]

    old_handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM,
                                                           signal.SIGHUP)}
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _raise_interrupted)
    interrupted = None
    start = time.monotonic()
    elapsed = 0.0
    print(f"soak: {len(jobs)} job(s) for {args.minutes:g} min, a sample every "
          f"{args.sample_s:g} s; samples -> {out_path}; job logs -> {log_root}", flush=True)
    for job in jobs:
        print(f"  {job.name}: {subprocess.list2cmdline(job.cmd)}", flush=True)
    try:
        with open(out_path, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=CSV_FIELDS, extrasaction="ignore")
            writer.writeheader()
            try:
                for job in jobs:
                    job.start()
                start = time.monotonic()
                n = 0
                while True:
                    elapsed = time.monotonic() - start
                    phase = "warmup" if elapsed < warmup_seconds(duration_s,
                                                                 args.warmup_minutes) else "steady"
                    shm_global = global_shm_count()
                    line = [f"[{_fmt_time(elapsed)}]"]
                    for job in jobs:
                        s = job.sample(round(elapsed, 1), phase, shm_global)
                        writer.writerow(s)
                        line.append(f"{job.name}: rss {_fmt(s['rss_master_mb'], '.0f')}+"
                                    f"{_fmt(s['rss_workers_mb'], '.0f')} MB, fds {s['fds']}, "
                                    f"shm {s['shm_job']}, steps {s['cum_steps']}, "
                                    f"{_fmt(s['steps_per_s'], '.0f')}/s"
                                    + ("" if s["alive"] else " (EXITED)"))
                    f.flush()
                    print("  ".join(line), flush=True)
                    if elapsed >= duration_s or all(job.ended_early for job in jobs):
                        break
                    n += 1
                    time.sleep(max(0.0, min(start + n * args.sample_s, start + duration_s)
                                   - time.monotonic()))
            except (KeyboardInterrupt, Interrupted) as e:
                interrupted = type(e).__name__ if isinstance(e, KeyboardInterrupt) else str(e)
                elapsed = time.monotonic() - start
    finally:
        # No second signal may cut the cleanup short: stopping is bounded (~30 s per job).
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)
        for job in jobs:
            job.stop()
        survivors = {job.name: job.survivors() for job in jobs}
        for sig, handler in old_handlers.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)

    if interrupted:
        print(f"\nsoak: interrupted ({interrupted}) after {elapsed:.0f} s; jobs stopped")
    warmup_s = warmup_seconds(elapsed if interrupted else duration_s, args.warmup_minutes)
    ok = report(jobs, warmup_s, limits)
    for name, pids in survivors.items():
        if pids:
            ok = False
            print(f"FAIL  {name}: processes still running after stop: {pids}")
    print(f"\nsamples: {out_path}")
    if args.keep_logs:
        print(f"job logs: {log_root}")
    else:
        shutil.rmtree(log_root, ignore_errors=True)
    print(f"soak: {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
