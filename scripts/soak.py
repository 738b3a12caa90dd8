#!/usr/bin/env python
"""Soak test: does a long ``rlfast train`` run leak memory, file descriptors, shared memory or
speed, and does it stay flat when its sampler workers are killed and restarted?

Runs its jobs concurrently, each as its own ``python -m rlfast.cli train`` subprocess (its own
session / process group), for ``--minutes`` (default 60). The default pair is issue 54's:

* ``ppo-pong``: PPO on ``atari:pong`` with the cpu sampler (sync runner, the preset's 8
  environments, one worker);
* ``dqn-async``: DQN on ``atari:pong``, ``--runner async``, cpu sampler (the preset's 16
  environments, one worker in the sampler process).

The earlier pair stays selectable with ``--jobs``: ``ppo`` (PPO on CartPole-v1, 4 envs) and
``dqn`` (sync DQN on ``atari:pong``, 4 envs), both with the cpu sampler.

What is shrunk (``--set``) to fit a 2-core machine, and why; everything else (models, batch
sizes, replay ratio, environments) is the preset's: evaluation (1 environment, at most 1000
steps and 1 trajectory; the presets' 4 x 40,000 steps would take minutes of a shared core at
every log row), the log interval (a progress.csv row every ~20-40 s instead of every 100k
steps, so that the speed is sampled often), and for DQN the replay (``--dqn-replay``, default
5,000 transitions, about 35 MB of frames: the preset's million do not fit in memory, and the
buffer must be full before the warm-up ends so that the RSS check sees leaks, not filling) and
``min_steps_learn`` (2,000, below the replay size).

Pinning: with ``--cpus-per-job N`` (default 1) each job gets its own N cores through an
affinity code (``<slot>slt_<ncpu>cpu_0gpu_0hto_<N>cpr``, one sampler worker per core; async
jobs add ``_1res_1ass``: the optimizer on the first core, the sampler on the rest). An async
run needs two cores, so with N = 1 an async job takes a 2-core code: its optimizer on an even
core of its own and its sampler on the next core, which it shares with a sync job (the sampler
is throttled to the optimizer's replay ratio and uses a fraction of that core); sync jobs take
the cores left. On 2 cores the default pair is therefore ``dqn-async``
``0slt_2cpu_0gpu_0hto_2cpr_1res_1ass`` (optimizer on core 0, sampler and its worker on core 1)
and ``ppo-pong`` ``1slt_2cpu_0gpu_0hto_1cpr`` (master and worker on core 1). ``--cpus-per-job
0`` leaves the affinity to rlfast.

Every ``--sample-s`` seconds (default 60) it records per job: the RSS of the master and of its
workers (all descendants summed: sampler workers, and in an async run the sampler process
too), open file descriptors (master + workers), shared memory segments the job holds (distinct
``/dev/shm/...`` files or memfds mapped in or open by any of its processes, deleted ones
included -- ``multiprocessing.RawArray`` unlinks its file at once, so only ``/proc/<pid>/maps``
shows it), the global ``/dev/shm`` entry count (information only: other users of the machine
change it), and from the job's progress.csv the training speed (the CumSteps delta over the
CumTime delta -- training time, evaluation excluded -- of the rows logged since the previous
sample; blank when no new row arrived) and ``WorkerRestarts``.

Injected restarts: ``--kill-worker-every MINUTES`` SIGKILLs one sampler worker of each job at
every multiple of MINUTES, right after that sample (none in the last ``max(2 samples, 60 s)``
of the run, so that the restart reaches a progress.csv row): a leaf among the deepest
descendants of the job's master (the master's children in a sync run, the sampler process's
in an async one), the lowest pid on a tie. Each job then runs with ``--set
sampler.max_worker_restarts=K``, K = minutes // every + 2. A kill due before the job's first
training row waits for it (a worker killed while the sampler is still being built ends the
run: rlfast restarts workers that have started). Each kill (time, job, pid) is printed and
counted in the samples.

Warm-up: the first 5 minutes or 1/6 of the run, whichever is smaller (of the actual length
when the soak is interrupted), or exactly ``--warmup-minutes``. Only samples after it are
judged:

* memory growth < ``--max-rss-growth`` (5%), each of: the master's RSS, the workers' summed
  RSS, the workers' summed USS (the pages no other process maps: what they alone cost) and
  the job's summed PSS (each page divided among the processes that map it): first
  post-warm-up sample to the last, or in runs with 8+ post-warm-up samples the mean of the
  first 2-3 to the mean of the last 2-3 (the master's RSS wobbles by a few percent from sample
  to sample as the allocator takes and returns memory). With ``--kill-worker-every`` the
  workers' RSS is shown but not judged: a replacement is forked from the master as it is then
  (larger than when the first workers were forked, before the optimizer and the training
  buffers existed), and its RSS counts every master page it shares copy-on-write, which costs
  no memory (seen: a PPO Pong worker at 249 MB RSS before its first restart, its replacement
  at 348 MB RSS with 57 MB USS); its own growth shows in USS and the job's in PSS;
* steps/s falls by at most ``--max-speed-fall`` (10%): the mean of the first post-warm-up
  rates against the mean of the last ones (1 each in short runs, up to 5 in long ones: a
  quarter of the rates); the spread around the median is printed for information;
* no growth of open fds or of the job's shared-memory segments (last <= first), a constant
  number of worker processes, and the job still alive at the end;
* ``WorkerRestarts`` at the end equals the kills that landed (0 without ``--kill-worker-every``),
  and every scheduled kill found a worker to kill.

DQN replay: its buffer fills as the run goes and the master's RSS grows with it (frame-buffer
pages, ~7 KB per transition, are touched as they are written), so ``--dqn-replay`` is chosen
to fill well inside the default 5-minute warm-up on a busy machine (2,000 steps before
learning, then the replay ratio's pace). In a short run (``--minutes 3``: a 30 s warm-up) the
replay may still be filling after the warm-up, so the DQN RSS check can fail there; it is meant
for runs of 15+ minutes.

Samples go to ``--out`` (default ``data/soak/<timestamp>.csv``, written as the run goes). At
the end, or on Ctrl-C / SIGTERM / SIGHUP of the soak, the jobs are stopped (SIGTERM to the
master, which ``rlfast train`` turns into a clean shutdown of its sampler; after 30 s SIGTERM,
then SIGKILL, to whatever of the job is left), and a table per job (every sample), its kills
and restart lines, and the verdict are printed. Each job also gets SIGTERM from the kernel
should the soak die without cleaning up (Linux parent-death signal). Exit status: 0 when every
job passes, 1 otherwise.

    python scripts/soak.py --minutes 60                            # ppo-pong and dqn-async
    python scripts/soak.py --minutes 60 --kill-worker-every 10     # with injected restarts
    python scripts/soak.py --minutes 3 --sample-s 20 --jobs ppo    # a quick look
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
from typing import Any, Callable, Mapping, NamedTuple, Sequence

import psutil

REPO = Path(__file__).resolve().parents[1]
MB = 1024.0 * 1024.0
DEFAULT_WARMUP_S = 5 * 60.0
HUGE_STEPS = 10 ** 12  # "forever": the soak stops the job, not its step budget

EVAL_SETS = ["sampler.eval_n_envs=1", "sampler.eval_max_steps=1000",
             "sampler.eval_max_trajectories=1"]
# Preset values the soak overrides per job ({replay} is filled from --dqn-replay); n_envs None:
# the preset's. The log intervals aim at a progress.csv row every ~20-40 s on one shared core.
JOBS: dict[str, dict[str, Any]] = {
    "ppo-pong": dict(algo="ppo", env="atari:pong", runner="sync", n_envs=None, sets=[
        "runner.log_interval_steps=8192"] + EVAL_SETS),
    "dqn-async": dict(algo="dqn", env="atari:pong", runner="async", n_envs=None, sets=[
        "algo.replay_size={replay}", "algo.min_steps_learn=2000",
        "runner.log_interval_steps=2000"] + EVAL_SETS),
    "ppo": dict(algo="ppo", env="CartPole-v1", runner="sync", n_envs=4, sets=[
        "runner.log_interval_steps=204800",  # ~8k steps/s on one core: a row every ~25 s
        "sampler.eval_n_envs=2", "sampler.eval_max_steps=1000",
        "sampler.eval_max_trajectories=2"]),
    "dqn": dict(algo="dqn", env="atari:pong", runner="sync", n_envs=4, sets=[
        "algo.replay_size={replay}", "algo.min_steps_learn=2000",
        "runner.log_interval_steps=2000"] + EVAL_SETS),  # ~70 steps/s while learning
}
DEFAULT_JOBS = "ppo-pong,dqn-async"

CSV_FIELDS = ["job", "t_s", "phase", "alive", "master_pid", "n_workers", "rss_master_mb",
              "rss_workers_mb", "uss_master_mb", "uss_workers_mb", "pss_total_mb", "fds_master",
              "fds_workers", "fds", "shm_job", "shm_global",
              "cum_steps", "progress_rows", "steps_per_s", "worker_restarts", "kills",
              "killed_pid"]


# ---- commands -----------------------------------------------------------------------------
def affinity_code(slot: int, n_cpu: int, cpus_per_job: int, runner: str = "sync") -> str:
    """The rlfast affinity code pinning job ``slot`` to cores
    ``[slot * cpus_per_job, (slot + 1) * cpus_per_job)`` of an ``n_cpu``-core machine; an
    async job's optimizer gets the first of them (``1res_1ass``), its sampler the rest."""
    code = f"{slot}slt_{n_cpu}cpu_0gpu_0hto_{cpus_per_job}cpr"
    return code + "_1res_1ass" if runner == "async" else code


def job_affinity_codes(runners: Sequence[str], n_cpu: int, cpus_per_job: int) -> list[str]:
    """One affinity code per job (``runners``: each job's ``"sync"`` or ``"async"``), each job
    on its own ``cpus_per_job`` cores in the order given. With one core per job an async job
    (which needs two) gets a 2-core code, its optimizer on an even core of its own and its
    sampler on the next core, shared with a sync job; sync jobs take the cores left, lowest
    first. ValueError when the jobs do not fit ``n_cpu`` cores."""
    bad = [r for r in runners if r not in ("sync", "async")]
    if bad:
        raise ValueError(f"runners must be 'sync' or 'async'; got {bad}")
    n_async = sum(r == "async" for r in runners)
    if cpus_per_job > 1:
        if n_cpu % cpus_per_job or len(runners) * cpus_per_job > n_cpu:
            raise ValueError(f"{len(runners)} job(s) x {cpus_per_job} cores do not fit "
                             f"{n_cpu} cores (use --cpus-per-job 0 to share them)")
        return [affinity_code(i, n_cpu, cpus_per_job, r) for i, r in enumerate(runners)]
    if cpus_per_job != 1:
        raise ValueError(f"cpus_per_job must be >= 1 (0: no pinning); got {cpus_per_job}")
    if len(runners) > n_cpu or 2 * n_async > n_cpu:
        raise ValueError(f"{len(runners)} job(s), {n_async} of them async (2 cores each, one "
                         f"shared), do not fit {n_cpu} cores at one core per job (use "
                         f"--cpus-per-job 0 to share them)")
    optimizer_cores = [2 * k for k in range(n_async)]
    free = [c for c in range(n_cpu) if c not in optimizer_cores]
    codes = []
    for runner in runners:
        if runner == "async":
            codes.append(affinity_code(optimizer_cores.pop(0) // 2, n_cpu, 2, "async"))
        else:
            codes.append(affinity_code(free.pop(0), n_cpu, 1))
    return codes


def job_command(name: str, log_dir: str, *, replay_size: int, affinity: str | None,
                extra_sets: Sequence[str] = (), max_worker_restarts: int = 0,
                python: str = sys.executable) -> list[str]:
    """The ``python -m rlfast.cli train ...`` command line of soak job ``name``; with
    ``max_worker_restarts`` > 0 the job may replace that many failed sampler workers."""
    spec = JOBS[name]
    cmd = [python, "-m", "rlfast.cli", "train", spec["algo"], spec["env"], "--sampler", "cpu",
           "--steps", str(HUGE_STEPS)]
    if spec["n_envs"] is not None:
        cmd += ["--n-envs", str(spec["n_envs"])]
    if spec["runner"] != "sync":
        cmd += ["--runner", spec["runner"]]
    cmd += ["--log-dir", log_dir, "--no-progress", "--snapshot-mode", "last"]
    if affinity:
        cmd += ["--affinity", affinity]
    sets = list(spec["sets"])
    if max_worker_restarts:
        sets.append(f"sampler.max_worker_restarts={max_worker_restarts}")
    for s in sets + list(extra_sets):
        cmd += ["--set", s.format(replay=replay_size)]
    return cmd


def restarts_allowed(minutes: float, every_minutes: float | None) -> int:
    """``sampler.max_worker_restarts`` for a run of ``minutes`` with a worker killed every
    ``every_minutes``: the kills plus 2 spare (0 without kills)."""
    if not every_minutes:
        return 0
    return int(minutes // every_minutes) + 2


def kill_times(duration_s: float, every_s: float, sample_s: float) -> list[float]:
    """When the soak kills a worker of each job: every multiple of ``every_s`` from the first,
    up to ``max(2 * sample_s, 60)`` seconds before the end, so that each restart shows in a
    progress.csv row before the last sample. [] when ``every_s`` is not positive."""
    if not every_s or every_s <= 0:
        return []
    last = duration_s - max(2.0 * sample_s, 60.0)
    times = []
    k = 1
    while k * every_s <= last + 1e-9:
        times.append(k * every_s)
        k += 1
    return times


def kill_due(elapsed_s: float, times: Sequence[float], done: int) -> bool:
    """Whether the next scheduled kill (``times[done]``) is due at ``elapsed_s``. One kill per
    sample at most: a late sample makes the kill it passed, the next sample the one after."""
    return done < len(times) and times[done] <= elapsed_s


def deepest_leaves(children: Mapping[int, Sequence[int]], root: int,
                   min_depth: int = 1) -> list[int]:
    """The deepest descendants of ``root`` in the tree ``children`` (pid -> its children's
    pids), sorted: leaves all, since nothing lies below them. [] when they lie less than
    ``min_depth`` levels below ``root`` (or ``root`` has no descendant)."""
    level = sorted(children.get(root, ()))
    deepest: list[int] = []
    depth = 0
    while level:
        deepest, depth = level, depth + 1
        level = sorted(c for pid in level for c in children.get(pid, ()))
    return deepest if depth >= min_depth else []


def choose_victim(master_pid: int, min_depth: int = 1) -> psutil.Process | None:
    """The sampler worker the soak kills in the job whose master is ``master_pid``: the lowest
    pid among the deepest descendants still running (the master's children in a sync run,
    ``min_depth`` 1; the sampler process's in an async one, ``min_depth`` 2, so that a moment
    without workers never makes the sampler process the victim); None when there is none."""
    try:
        procs = psutil.Process(master_pid).children(recursive=True)
    except psutil.Error:
        return None
    live = {p.pid: p for p in procs if _alive(p)}
    tree: dict[int, list[int]] = {}
    for pid, proc in live.items():
        try:
            tree.setdefault(proc.ppid(), []).append(pid)
        except psutil.Error:
            continue
    leaves = deepest_leaves(tree, master_pid, min_depth)
    return live[leaves[0]] if leaves else None


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


def _memory(proc: psutil.Process) -> tuple[float, float, float]:
    """RSS, USS and PSS of ``proc`` in MB (USS and PSS NaN where /proc/<pid>/smaps cannot be
    read). RSS counts every resident page the process maps, shared or not; USS only the pages
    no other process maps (what the process alone costs); PSS each page divided by the number
    of processes that map it (summed over a job: the job's share of the machine's memory)."""
    rss = proc.memory_info().rss / MB
    try:
        full = proc.memory_full_info()
    except (psutil.AccessDenied, AttributeError):
        return rss, float("nan"), float("nan")
    return rss, full.uss / MB, getattr(full, "pss", float("nan") * MB) / MB


def process_tree_stats(pid: int) -> dict[str, Any] | None:
    """RSS, USS and PSS (MB), fds and shared-memory segments of process ``pid`` and of all
    its descendants (the "workers"); None when ``pid`` is gone."""
    try:
        master = psutil.Process(pid)
        rss_master, uss_master, pss_total = _memory(master)
        fds_master = _num_fds(master)
        children = master.children(recursive=True)
    except psutil.Error:
        return None
    rss_workers = uss_workers = 0.0
    fds_workers = 0
    n_workers = 0
    shm = shm_segments(pid)
    for child in children:
        try:
            rss, uss, pss = _memory(child)
            fds = _num_fds(child)
        except psutil.Error:
            continue  # exited between listing and reading
        rss_workers += rss
        uss_workers += uss
        pss_total += pss
        fds_workers += fds
        n_workers += 1
        shm |= shm_segments(child.pid)
    return dict(rss_master_mb=rss_master, rss_workers_mb=rss_workers, uss_master_mb=uss_master,
                uss_workers_mb=uss_workers, pss_total_mb=pss_total, n_workers=n_workers,
                fds_master=fds_master, fds_workers=fds_workers, fds=fds_master + fds_workers,
                shm_job=len(shm), children=children)


def _column(fieldnames: Sequence[str], suffix: str) -> str | None:
    """The progress.csv column named ``suffix`` (with any prefix, e.g. ``Diagnostics/``)."""
    for name in fieldnames:
        if name == suffix or name.endswith("/" + suffix):
            return name
    return None


class ProgressRow(NamedTuple):
    """What the soak reads from one progress.csv row."""

    steps: float  # CumSteps
    secs: float  # CumTime (s): training time
    restarts: float  # WorkerRestarts; NaN when the run logs no such column


def read_progress(path: str | os.PathLike) -> list[ProgressRow]:
    """CumSteps, CumTime and WorkerRestarts of every complete progress.csv row with training
    time > 0 (the pre-training evaluation row has none); [] when the file is missing or
    empty."""
    try:
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            steps_col = _column(reader.fieldnames or [], "CumSteps")
            time_col = _column(reader.fieldnames or [], "CumTime (s)")
            restarts_col = _column(reader.fieldnames or [], "WorkerRestarts")
            if steps_col is None or time_col is None:
                return []
            rows = []
            for row in reader:
                try:
                    steps, secs = float(row[steps_col]), float(row[time_col])
                    restarts = float(row[restarts_col]) if restarts_col else float("nan")
                except (TypeError, ValueError, KeyError):
                    continue  # a row being written
                if secs > 0 and math.isfinite(steps) and math.isfinite(secs):
                    rows.append(ProgressRow(steps, secs, restarts))
            return rows
    except OSError:
        return []


def window_rate(rows: Sequence[ProgressRow], seen: int) -> float:
    """Steps per second of training over the rows after the first ``seen`` rows: the CumSteps
    delta over the CumTime delta from the last row already seen (from zero when none was).
    NaN when no new row arrived."""
    if len(rows) <= seen:
        return float("nan")
    steps, secs = rows[-1].steps, rows[-1].secs
    prev_steps, prev_secs = (rows[seen - 1].steps, rows[seen - 1].secs) if seen > 0 else (0, 0)
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
    worker_depth: int = 1  # levels below the master of its sampler workers (async: 2)
    kills: list[tuple[float, int]] = field(default_factory=list)  # (t_s, pid) that landed
    kills_missed: list[tuple[float, str]] = field(default_factory=list)  # (t_s, why)

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
                      uss_master_mb=stats["uss_master_mb"] if stats else nan,
                      uss_workers_mb=stats["uss_workers_mb"] if stats else nan,
                      pss_total_mb=stats["pss_total_mb"] if stats else nan,
                      fds_master=stats["fds_master"] if stats else -1,
                      fds_workers=stats["fds_workers"] if stats else -1,
                      fds=stats["fds"] if stats else -1,
                      shm_job=stats["shm_job"] if stats else -1, shm_global=shm_global,
                      cum_steps=int(rows[-1].steps) if rows else 0, progress_rows=len(rows),
                      steps_per_s=rate, worker_restarts=rows[-1].restarts if rows else nan,
                      kills=len(self.kills), killed_pid="")
        self.samples.append(sample)
        return sample

    @property
    def kills_tried(self) -> int:
        """Scheduled kills made or missed so far."""
        return len(self.kills) + len(self.kills_missed)

    @property
    def training(self) -> bool:
        """Whether the job has logged a training row: a kill waits for it, since a worker
        that dies while the sampler is being built ends the run (rlfast restarts workers
        only once they have started)."""
        return self.rows_seen > 0

    def scheduled_kill(self, t_s: float, times: Sequence[float], duration_s: float) -> str:
        """Make the kill of ``times`` due at ``t_s`` (after this sample; none at the end of
        the soak or in a job that exited), unless the job has not trained yet; returns the
        console note ('' when no kill was due)."""
        if t_s >= duration_s or self.ended_early or not kill_due(t_s, times, self.kills_tried):
            return ""
        if not self.training:
            return ", kill waits for the first training row"
        pid = self.kill_worker(t_s)
        return f", KILLED worker {pid}" if pid else ", no worker to kill"

    def kill_worker(self, t_s: float) -> int | None:
        """SIGKILL one sampler worker (:func:`choose_victim`) and record it, in the last
        sample too; returns its pid, or None when the job had none to kill (recorded as
        missed)."""
        assert self.proc is not None
        victim = choose_victim(self.proc.pid, self.worker_depth) if self.proc.poll() is None \
            else None
        if victim is not None:
            try:
                victim.send_signal(signal.SIGKILL)
            except psutil.Error:
                victim = None
        if victim is None:
            self.kills_missed.append((t_s, "found no sampler worker to kill"))
            return None
        self.kills.append((t_s, victim.pid))
        if self.samples:
            self.samples[-1].update(kills=len(self.kills), killed_pid=victim.pid)
        return victim.pid

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

    def restart_lines(self) -> list[str]:
        """The job's restart lines (:func:`restart_lines`) from its ``debug.log``, which gets
        every line rlfast logs (its console shows some only), else from its output."""
        try:
            with open(os.path.join(self.log_dir, "debug.log"), errors="replace") as f:
                return restart_lines(f.read())
        except OSError:
            return restart_lines(self.output_tail(n=100_000))

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
    max_rss_growth: float = 0.05  # fraction
    max_speed_fall: float = 0.10  # fraction


def warmup_seconds(duration_s: float, warmup_minutes: float | None = None) -> float:
    """The warm-up: ``warmup_minutes`` when given, else 5 minutes or 1/6 of the run,
    whichever is smaller."""
    if warmup_minutes is not None:
        return warmup_minutes * 60.0
    return min(DEFAULT_WARMUP_S, duration_s / 6.0)


def _rss(sample: dict, key: str) -> float:
    """Memory figure ``key`` of a sample in MB (NaN when the sample lacks it, e.g. a CSV of
    an older soak); ``"total"``: RSS master plus workers."""
    if key == "total":
        return sample["rss_master_mb"] + sample["rss_workers_mb"]
    value = sample.get(key, float("nan"))
    return float(value) if value not in ("", None) else float("nan")


def _growth(first: float, last: float) -> float:
    return (last - first) / first if first > 0 else float("nan")


def speed_check(rates: Sequence[float], max_fall: float) -> tuple[str, bool, str]:
    """The steps/s check over the post-warm-up ``rates`` (NaN: no new row, skipped): the mean
    of the last k rates may fall at most ``max_fall`` (a fraction) below the mean of the
    first k, k a quarter of the rates, 1 to 5 (single rates are noisy on a shared machine). A
    faster end passes. The spread around the median is given for information."""
    finite = [r for r in rates if math.isfinite(r)]
    if len(finite) < 2:
        return ("steps/s", False, f"{len(finite)} progress.csv rate(s) after the warm-up; need "
                                  f">= 2 (run longer)")
    k = max(1, min(5, len(finite) // 4))
    first, last = statistics.fmean(finite[:k]), statistics.fmean(finite[-k:])
    fall = 1.0 - last / first if first > 0 else float("nan")
    ok = math.isfinite(fall) and fall <= max_fall
    med = statistics.median(finite)
    what = f"mean of first/last {k}" if k > 1 else "first -> last rate"
    return ("steps/s", ok, f"{first:.1f} -> {last:.1f} ({-fall * 100:+.1f}%, limit "
                           f"-{max_fall * 100:.0f}%; {what} of {len(finite)}); median "
                           f"{med:.1f}, min {min(finite) / med * 100 - 100:+.1f}%, max "
                           f"{max(finite) / med * 100 - 100:+.1f}% (info)")


def restarts_check(samples: Sequence[dict], kills_missed: int = 0) -> tuple[str, bool, str]:
    """The WorkerRestarts check: the job's last logged WorkerRestarts equals the kills that
    landed (0 without injected restarts), and no scheduled kill went without a victim."""
    kills = samples[-1]["kills"] if samples else 0
    logged = [s["worker_restarts"] for s in samples
              if isinstance(s["worker_restarts"], (int, float))
              and math.isfinite(s["worker_restarts"])]
    missed = f", {kills_missed} kill(s) found no worker" if kills_missed else ""
    if not logged:
        return ("restarts", not kills and not kills_missed,
                f"no WorkerRestarts logged; kills landed {kills}{missed}")
    last = int(logged[-1])
    return ("restarts", last == kills and not kills_missed,
            f"WorkerRestarts {last}, kills landed {kills}{missed}")


# The memory figures judged, in order: (sample key, label). "total" is RSS master + workers.
MEMORY_KEYS = (("rss_master_mb", "RSS master"), ("rss_workers_mb", "RSS workers"),
               ("total", "RSS total"), ("uss_workers_mb", "USS workers"),
               ("pss_total_mb", "PSS total"))
# Why a run with injected restarts judges the workers by USS and the job by PSS, not by RSS.
FORK_NOTE = ("info with restarts: a replacement is forked from the master as it is now, and "
             "its RSS counts the master's pages it shares copy-on-write; USS workers and PSS "
             "total are judged")


def memory_checks(post: Sequence[dict], limits: Limits,
                  restarted: bool = False) -> list[tuple[str, bool, str]]:
    """Growth of each :data:`MEMORY_KEYS` figure over the post-warm-up samples ``post``: the
    mean of the first k samples against that of the last k (k = 1 in short runs, up to 3 in
    long ones: the master's RSS wobbles by some percent as the allocator takes and returns
    memory, and a leak shows in the means as well). RSS total is information; so is RSS
    workers in a run with injected restarts (``restarted``, see :data:`FORK_NOTE`). A figure
    that could not be read (NaN, e.g. no workers or no smaps) passes."""
    k = max(1, min(3, len(post) // 4))
    what = f"mean of first/last {k} samples" if k > 1 else "first -> last sample"
    checks = []
    for key, label in MEMORY_KEYS:
        values = [_rss(s, key) for s in post]
        a, b = statistics.fmean(values[:k]), statistics.fmean(values[-k:])
        g = _growth(a, b)
        info = key == "total" or (restarted and key == "rss_workers_mb")
        ok = info or not (g >= limits.max_rss_growth)
        limit = (FORK_NOTE if key == "rss_workers_mb" else "info") if info else \
            f"limit +{limits.max_rss_growth * 100:.0f}%"
        checks.append((label, ok, f"{a:.1f} -> {b:.1f} MB ({g * 100:+.1f}%, {limit}; {what})"))
    return checks


def judge(samples: Sequence[dict], warmup_s: float, limits: Limits,
          ended_early: bool = False, kills_missed: int = 0) -> list[tuple[str, bool, str]]:
    """The checks of one job: (name, passed, detail) for each target."""
    post = [s for s in samples if s["t_s"] >= warmup_s and s["alive"]]
    checks: list[tuple[str, bool, str]] = []
    if ended_early:
        checks.append(("alive", False, "the job exited before the soak ended"))
    if samples:
        checks.append(restarts_check(samples, kills_missed))
    if len(post) < 2:
        checks.append(("samples", False, f"{len(post)} post-warm-up sample(s); need >= 2 "
                                         f"(run longer or sample more often)"))
        return checks
    first, last = post[0], post[-1]
    # RSS: the mean of the first k post-warm-up samples against that of the last k (k = 1 in
    # short runs, up to 3 in long ones): the master's RSS wobbles by some percent as the
    # allocator takes and returns memory, and a leak shows in the means as well.
    checks += memory_checks(post, limits, restarted=bool(samples[-1]["kills"]))
    checks.append(speed_check([s["steps_per_s"] for s in post], limits.max_speed_fall))
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
    """The samples of one job as a text table (``w`` marks warm-up samples, ``x`` a job no
    longer running; ``kills``: workers killed up to and including right after the sample,
    ``restarts``: WorkerRestarts of the last progress.csv row)."""
    head = (f"{'time':>7} {'':1} {'RSS master':>11} {'RSS workers':>12} {'n':>2} {'fds':>5} "
            f"{'shm':>4} {'shm(all)':>8} {'steps':>11} {'steps/s':>9} {'restarts':>8} "
            f"{'kills':>5} {'killed':>8}")
    lines = [head, "-" * len(head)]
    for s in samples:
        mark = "w" if s["t_s"] < warmup_s else ("x" if not s["alive"] else "")
        lines.append(f"{_fmt_time(s['t_s']):>7} {mark:1} {_fmt(s['rss_master_mb'], '.1f'):>8} MB "
                     f"{_fmt(s['rss_workers_mb'], '.1f'):>9} MB {s['n_workers']:>2} "
                     f"{s['fds']:>5} {s['shm_job']:>4} {s['shm_global']:>8} "
                     f"{s['cum_steps']:>11} {_fmt(s['steps_per_s'], '.1f'):>9} "
                     f"{_fmt(s['worker_restarts'], '.0f'):>8} {s['kills']:>5} "
                     f"{s['killed_pid'] or '':>8}")
    return "\n".join(lines)


def restart_lines(output: str) -> list[str]:
    """The console lines in which rlfast names a sampler worker restart and its cause."""
    return [line.strip() for line in output.splitlines()
            if "Sampler worker" in line and "restarted" in line]


def report(jobs: Sequence[Job], warmup_s: float, limits: Limits,
           out: Callable[[str], None] = print) -> bool:
    """Print each job's table, kills, restart lines and checks; True when every job passes."""
    all_ok = True
    for job in jobs:
        out("")
        out(f"== {job.name}: python {subprocess.list2cmdline(job.cmd[1:])}")
        out(f"   (warm-up: first {warmup_s:.0f} s, marked w; RSS in MB; fds and shm summed "
            f"over master + workers; shm(all): /dev/shm entries)")
        out(format_table(job.samples, warmup_s))
        for t_s, pid in job.kills:
            out(f"   kill  {_fmt_time(t_s)} pid {pid} (SIGKILL)")
        for t_s, why in job.kills_missed:
            out(f"   kill  {_fmt_time(t_s)} missed: {why}")
        for line in job.restart_lines():
            out(f"   rlfast: {line}")
        checks = judge(job.samples, warmup_s, limits, ended_early=job.ended_early,
                       kills_missed=len(job.kills_missed))
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
    p.add_argument("--minutes", type=float, default=60.0, help="soak length (default 60)")
    p.add_argument("--sample-s", type=float, default=60.0,
                   help="seconds between samples (default 60)")
    p.add_argument("--jobs", default=DEFAULT_JOBS,
                   help=f"comma-separated from {sorted(JOBS)} (default {DEFAULT_JOBS})")
    p.add_argument("--warmup-minutes", type=float, default=None,
                   help="warm-up length (default: 5 minutes or 1/6 of the run, whichever is "
                        "smaller)")
    p.add_argument("--cpus-per-job", type=int, default=1,
                   help="cores pinned per job, one sampler worker each; an async job's "
                        "optimizer takes one (0: rlfast's default affinity, every core)")
    p.add_argument("--dqn-replay", type=int, default=5_000,
                   help="DQN replay size; should fill inside the warm-up (default 5000)")
    p.add_argument("--ppo-set", action="append", default=[], metavar="KEY=VALUE",
                   help="extra --set for the PPO jobs (after the soak's own)")
    p.add_argument("--dqn-set", action="append", default=[], metavar="KEY=VALUE",
                   help="extra --set for the DQN jobs (after the soak's own)")
    p.add_argument("--max-rss-growth", type=float, default=5.0,
                   help="allowed RSS growth after warm-up, percent (default 5)")
    p.add_argument("--max-speed-fall", type=float, default=10.0,
                   help="allowed fall of steps/s after warm-up, percent: mean of the last "
                        "rates against the mean of the first (default 10)")
    p.add_argument("--kill-worker-every", type=float, default=None, metavar="MINUTES",
                   help="SIGKILL one sampler worker of each job every MINUTES; the jobs run "
                        "with sampler.max_worker_restarts = minutes // MINUTES + 2 and must "
                        "log WorkerRestarts equal to the kills")
    p.add_argument("--out", default=None,
                   help="samples CSV (default data/soak/<timestamp>.csv)")
    p.add_argument("--keep-logs", action="store_true",
                   help="keep the jobs' log dirs (progress.csv, output.txt) instead of deleting")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run the soak from command-line ``argv``; the exit status (0 pass, 1 fail, 2 usage)."""
    args = _parser().parse_args(argv)
    names = [n.strip() for n in args.jobs.split(",") if n.strip()]
    unknown = [n for n in names if n not in JOBS]
    if not names or unknown or len(set(names)) != len(names):
        print(f"soak: --jobs must name distinct jobs from {sorted(JOBS)}; got {args.jobs!r}",
              file=sys.stderr)
        return 2
    if args.kill_worker_every is not None and not args.kill_worker_every > 0:
        print(f"soak: --kill-worker-every must be a positive number of minutes; got "
              f"{args.kill_worker_every}", file=sys.stderr)
        return 2
    n_cpu = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    try:
        codes = (job_affinity_codes([JOBS[n]["runner"] for n in names], n_cpu,
                                    args.cpus_per_job) if args.cpus_per_job
                 else [None] * len(names))
    except ValueError as e:
        print(f"soak: {e}", file=sys.stderr)
        return 2
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    out_path = Path(args.out) if args.out else REPO / "data" / "soak" / f"{stamp}.csv"
    out_path.parent.mkdir(parents=True, exist_ok=True)
    log_root = tempfile.mkdtemp(prefix=f"rlfast-soak-{stamp}-")
    limits = Limits(max_rss_growth=args.max_rss_growth / 100.0,
                    max_speed_fall=args.max_speed_fall / 100.0)
    duration_s = args.minutes * 60.0
    extra = dict(ppo=args.ppo_set, dqn=args.dqn_set)
    restarts = restarts_allowed(args.minutes, args.kill_worker_every)
    kill_at = kill_times(duration_s, (args.kill_worker_every or 0) * 60.0, args.sample_s)
    jobs = [Job(name, job_command(name, os.path.join(log_root, name),
                                  replay_size=args.dqn_replay, affinity=code,
                                  extra_sets=extra[JOBS[name]["algo"]],
                                  max_worker_restarts=restarts),
                os.path.join(log_root, name),
                worker_depth=2 if JOBS[name]["runner"] == "async" else 1)
            for name, code in zip(names, codes)]

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
    if args.kill_worker_every:
        print(f"  a sampler worker of each job is killed at "
              f"{', '.join(_fmt_time(t) for t in kill_at) or 'no time (run too short)'}",
              flush=True)
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
                        kill_note = job.scheduled_kill(round(elapsed, 1), kill_at, duration_s)
                        writer.writerow(s)
                        line.append(f"{job.name}: rss {_fmt(s['rss_master_mb'], '.0f')}+"
                                    f"{_fmt(s['rss_workers_mb'], '.0f')} MB, fds {s['fds']}, "
                                    f"shm {s['shm_job']}, steps {s['cum_steps']}, "
                                    f"{_fmt(s['steps_per_s'], '.0f')}/s, restarts "
                                    f"{_fmt(s['worker_restarts'], '.0f')}"
                                    + ("" if s["alive"] else " (EXITED)") + kill_note)
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
    for job in jobs:  # kills still waiting at the end were never made
        why = "not made: " + ("the job had exited" if job.ended_early
                              else "the job logged no training row")
        job.kills_missed += [(t_s, why) for t_s in kill_at[job.kills_tried:] if t_s <= elapsed]
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
