"""Run a sweep of experiments locally, queued over the hardware slots of one machine, or
on a Slurm cluster (``backend="slurm"``, one submitit job per run; see
:mod:`rlfast.utils.launching.slurm`).

``run_experiments`` takes a training script, an affinity code describing the machine and
how much of it each run gets, and the variants / log directories from ``make_variants``.
It queues every (variant, run_ID), starts each with ``launch_experiment`` as soon as one of
the code's run slots is free (never two runs in one slot), waits on the children with a
blocking wait (no polling), and keeps ``num_launched.txt`` and ``experiments_tree.txt`` in
the experiment directory so a sweep can be watched from another terminal. Each child runs
``python SCRIPT SLOT_CODE LOG_DIR RUN_ID *ARGS``, pinned with ``taskset`` to its slot's
CPUs where possible, with its stdout/stderr sent to files in its log directory.
"""
from __future__ import annotations

import datetime
import multiprocessing.connection
import os
import shutil
import subprocess
import sys
import threading
import time
from collections import deque, namedtuple
from collections.abc import Mapping, Sequence
from typing import Any

import psutil

from rlfast.utils.checks import check_choice, check_int
from rlfast.utils.launching.affinity import affinity_from_code, get_n_run_slots, prepend_run_slot
from rlfast.utils.launching.variant import save_variant
from rlfast.utils.logging.context import get_data_dir

__all__ = ["run_experiments", "launch_experiment", "experiment_command", "RunResult",
           "report_sweep", "stop_children", "kill_after_grace", "write_atomic",
           "NUM_LAUNCHED_FILE", "TREE_FILE"]

NUM_LAUNCHED_FILE = "num_launched.txt"
TREE_FILE = "experiments_tree.txt"
TERMINATE_GRACE_S = 5.0
BACKENDS = ("local", "slurm")

RunResult = namedtuple("RunResult", ["log_dir", "run_ID", "slot", "returncode"])
RunResult.__doc__ = ("One run of a sweep: its variant log dir, run_ID, run slot and exit code "
                     "(None when planned in a dry run and not started).")


def _sets_affinity(affinity: Any) -> bool:
    """False if any part of a decoded affinity has ``set_affinity`` off."""
    if isinstance(affinity, Mapping):
        return bool(affinity.get("set_affinity", True)) and all(
            _sets_affinity(v) for v in affinity.values() if isinstance(v, (Mapping, list)))
    if isinstance(affinity, (list, tuple)):
        return all(_sets_affinity(a) for a in affinity)
    return True


def _all_cpus(affinity: Any) -> set[int]:
    """``all_cpus`` of a decoded affinity; the union over the parts of a list."""
    if isinstance(affinity, Mapping):
        return {int(c) for c in affinity.get("all_cpus") or ()}
    if isinstance(affinity, (list, tuple)):
        return set().union(*(_all_cpus(a) for a in affinity))
    return set()


def _affinity_cpus(affinity: Any) -> list[int] | None:
    """CPUs a slot's affinity pins (union over multi-GPU parts), or None if it pins none or
    any part has ``set_affinity`` off."""
    if not _sets_affinity(affinity):
        return None
    return sorted(_all_cpus(affinity)) or None


def experiment_command(script: str, slot_code: str, log_dir: str, run_ID: int,
                       args: Sequence = (), python_executable: str | None = None,
                       pin: bool = True) -> list[str]:
    """The argv that ``launch_experiment`` runs: ``[taskset -c CPUS] python script slot_code
    log_dir run_ID *args``; taskset is used when ``pin`` is on, the slot pins CPUs and
    taskset is installed (Slurm jobs pass ``pin=False``: Slurm binds them itself)."""
    python_executable = python_executable or sys.executable
    command = [python_executable, str(script), slot_code, str(log_dir), str(run_ID),
               *(str(a) for a in args)]
    if not pin:
        return command
    cpus = _affinity_cpus(affinity_from_code(slot_code))
    taskset = shutil.which("taskset")
    if cpus and taskset:
        command = [taskset, "-c", ",".join(str(c) for c in cpus), *command]
    return command


def launch_experiment(script: str, run_slot: int, affinity_code: str, log_dir: str,
                      variant: Mapping, run_ID: int, args: Sequence,
                      python_executable: str | None = None, *,
                      capture_output: bool = True) -> subprocess.Popen:
    """Start one run: save ``variant`` to ``log_dir/variant.json`` and return the handle of
    ``[taskset -c CPUS] python script SLOT_CODE log_dir run_ID *args`` (SLOT_CODE is
    ``affinity_code`` with ``run_slot`` prepended).

    With ``capture_output`` (the default) the child's stdout and stderr go to
    ``log_dir/run_<run_ID>.stdout.txt`` and ``.stderr.txt`` (the parent's console stays
    readable); otherwise they are inherited. The child runs with ``PYTHONUNBUFFERED=1`` so
    those files fill as it goes.
    """
    n_slots = get_n_run_slots(affinity_code)
    if not 0 <= int(run_slot) < n_slots:
        raise ValueError(f"run_slot {run_slot} is out of range for affinity code "
                         f"{affinity_code!r}, which has {n_slots} run slot(s).")
    if not os.path.isfile(script):
        raise FileNotFoundError(f"Experiment script {script!r} does not exist.")
    slot_code = prepend_run_slot(int(run_slot), affinity_code)
    command = experiment_command(script, slot_code, log_dir, run_ID, args, python_executable)
    save_variant(variant, log_dir)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if not capture_output:
        return subprocess.Popen(command, env=env)
    stem = os.path.join(log_dir, f"run_{run_ID}")
    with open(f"{stem}.stdout.txt", "ab") as out, open(f"{stem}.stderr.txt", "ab") as err:
        return subprocess.Popen(command, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                env=env)


class _ChildWatcher:
    """Blocking wait for whichever of several Popen children exits first.

    Each child gets a file descriptor that becomes readable when it exits: a Linux pidfd,
    or else the read end of a pipe written by a thread blocked in ``Popen.wait``. Waiting
    is one ``multiprocessing.connection.wait`` on those descriptors.
    """

    def __init__(self) -> None:
        self._fds: dict[int, subprocess.Popen] = {}

    def add(self, proc: subprocess.Popen) -> None:
        try:
            fd = os.pidfd_open(proc.pid)
        except (AttributeError, OSError):
            fd, write_fd = os.pipe()

            def _notify() -> None:
                proc.wait()
                try:
                    os.write(write_fd, b"x")
                except OSError:
                    pass  # the watcher was closed first
                finally:
                    os.close(write_fd)
            threading.Thread(target=_notify, daemon=True).start()
        self._fds[fd] = proc

    def wait_any(self) -> list[subprocess.Popen]:
        """Block until at least one child exits; reap and return the exited ones."""
        ready = multiprocessing.connection.wait(list(self._fds))
        done = []
        for fd in ready:
            proc = self._fds.pop(fd)
            proc.wait()
            os.close(fd)
            done.append(proc)
        return done

    def close(self) -> None:
        for fd in self._fds:
            os.close(fd)
        self._fds.clear()


def stop_children(procs: list[subprocess.Popen]) -> None:
    """Stop child processes and everything they started: SIGTERM each child and its
    descendants, wait up to ``TERMINATE_GRACE_S`` in all, then SIGKILL whatever is still
    running, and reap the children."""
    descendants = []
    for proc in procs:
        try:
            descendants.extend(psutil.Process(proc.pid).children(recursive=True))
        except psutil.Error:
            pass
    for p in [*procs, *descendants]:
        try:
            p.terminate()
        except (OSError, psutil.Error):
            pass
    deadline = time.monotonic() + TERMINATE_GRACE_S
    for proc in procs:
        try:
            proc.wait(timeout=max(deadline - time.monotonic(), 0.01))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    kill_after_grace(descendants, max(deadline - time.monotonic(), 0.01))


def kill_after_grace(procs: list, grace_s: float) -> None:
    """Wait up to ``grace_s`` for ``psutil`` processes (already sent SIGTERM) to end, then
    SIGKILL whatever still runs and reap it."""
    _, alive = psutil.wait_procs(procs, timeout=grace_s)
    for p in alive:
        try:
            p.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(alive, timeout=1.0)


def write_atomic(path: str, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` through a temporary file and ``os.replace``, so a
    reader sees the old file or the new one, never a partial write."""
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def _tree_text(experiment_title: str, log_dirs: Sequence[str]) -> str:
    """Indented tree of the variant directories under the experiment directory."""
    lines = [f"{experiment_title}/"]
    seen: set[tuple[str, ...]] = set()
    for log_dir in log_dirs:
        parts = tuple(p for p in os.path.normpath(log_dir).split(os.sep) if p not in ("", "."))
        for depth in range(1, len(parts) + 1):
            if parts[:depth] not in seen:
                seen.add(parts[:depth])
                lines.append("    " * depth + parts[depth - 1] + "/")
    return "\n".join(lines) + "\n"


def _stderr_tail(log_dir: str, run_ID: int, n_lines: int = 5) -> str:
    path = os.path.join(log_dir, f"run_{run_ID}.stderr.txt")
    try:
        with open(path, "r", encoding="utf-8", errors="replace") as f:
            tail = f.read().splitlines()[-n_lines:]
    except OSError:
        return ""
    return "".join(f"\n    | {line}" for line in tail)


def run_experiments(script: str, affinity_code: str, experiment_title: str,
                    runs_per_setting: int, variants: Sequence[Mapping],
                    log_dirs: Sequence[str], common_args: Sequence | None = None,
                    runs_args: Sequence[Sequence] | None = None, log_root: str | None = None,
                    python_executable: str | None = None, capture_output: bool = True,
                    dry_run: bool = False, backend: str = "local",
                    slurm: Mapping[str, Any] | None = None,
                    wait: bool = True) -> list[RunResult]:
    """Run every variant ``runs_per_setting`` times, queued over the code's run slots
    (``backend="local"``) or as one Slurm job per run (``backend="slurm"``).

    Run ``k`` of variant ``i`` logs under ``log_root/experiment_title/log_dirs[i]`` and gets
    argv ``SLOT_CODE LOG_DIR k *common_args *runs_args[i]``. Runs are queued run_ID-major
    (every variant's run 0 first), and each starts as soon as one of the
    ``get_n_run_slots(affinity_code)`` slots is free. ``log_root`` defaults to
    ``<data dir>/local/<yyyymmdd>`` (data dir: ``$RLFAST_DATA_DIR`` or ``./data``).

    A run exiting non-zero is reported on stderr (log dir, run_ID, slot, exit code and the
    end of its stderr file) and the others go on. Returns one ``RunResult`` per run in
    launch order; the caller checks ``returncode`` (a failure summary is also printed at
    the end). On KeyboardInterrupt (or any error) every running child and its descendants
    are terminated, killed after a grace period, and the exception re-raised. With
    ``dry_run`` nothing is started or written: the plan (nominal slot, command) is
    printed and returned with ``returncode=None``.

    ``backend="slurm"`` submits each run as its own submitit job, configured by the
    ``slurm`` dict (partition, time, gpus_per_node, ...; see
    :func:`rlfast.utils.launching.slurm.check_slurm_options`), each on run slot 0 of
    ``affinity_code``; it needs ``pip install rlfast[slurm]``. It writes the same
    bookkeeping files and ``variant.json``, prints the job ids, and returns
    ``SlurmRunResult``s: ``RunResult``s (returncode 0 for a job that succeeded, 1 for one
    that failed) that also carry the submitit job as ``.job``. With ``wait=False`` it
    returns right after submitting, every ``returncode`` None (wait on ``result.job``).
    See :func:`rlfast.utils.launching.slurm.run_slurm_sweep`.
    """
    check_choice(backend, "backend", BACKENDS)
    if backend == "local":
        if slurm is not None:
            raise ValueError("slurm options were given with backend='local'; pass "
                             "backend='slurm' to submit the runs as Slurm jobs.")
        if not wait:
            raise ValueError("wait=False needs backend='slurm'; the local backend runs "
                             "its children until they finish.")
    elif not capture_output:
        raise ValueError("capture_output=False is a local-backend option: Slurm jobs always "
                         "write run_<ID>.stdout.txt / .stderr.txt in the log dir.")
    script = os.path.abspath(script)
    runs_per_setting = check_int(runs_per_setting, "runs_per_setting", minimum=1)
    if len(variants) != len(log_dirs):
        raise ValueError(f"variants and log_dirs must have the same length; got "
                         f"{len(variants)} variants and {len(log_dirs)} log_dirs.")
    if len(set(log_dirs)) != len(log_dirs):
        raise ValueError(f"log_dirs must be unique (runs of different variants would share a "
                         f"directory); got {list(log_dirs)}.")
    if runs_args is not None and len(runs_args) != len(variants):
        raise ValueError(f"runs_args needs one list per variant; got {len(runs_args)} for "
                         f"{len(variants)} variants.")
    if not os.path.isfile(script):
        raise FileNotFoundError(f"Experiment script {script!r} does not exist.")
    common_args = list(common_args or [])
    runs_args = [list(a) for a in runs_args] if runs_args is not None else [[]] * len(variants)
    n_slots = get_n_run_slots(affinity_code)
    if log_root is None:
        log_root = os.path.join(get_data_dir(), "local",
                                datetime.datetime.now().strftime("%Y%m%d"))
    exp_dir = os.path.abspath(os.path.join(log_root, experiment_title))
    queue = deque((os.path.join(exp_dir, log_dirs[i]), i, run_ID)
                  for run_ID in range(runs_per_setting) for i in range(len(variants)))
    total = len(queue)

    if backend == "slurm":
        from rlfast.utils.launching.slurm import run_slurm_sweep  # submitit is optional
        return run_slurm_sweep(
            script, affinity_code, experiment_title, exp_dir,
            [(run_dir, variants[i], run_ID, [*common_args, *runs_args[i]])
             for run_dir, i, run_ID in queue],
            log_dirs, slurm, python_executable=python_executable, dry_run=dry_run, wait=wait)

    if dry_run:
        print(f"[dry run] {total} runs of {script} over {n_slots} run slot(s) of "
              f"{affinity_code}; experiment dir {exp_dir}")
        plan = []
        for k, (run_dir, i, run_ID) in enumerate(queue):
            slot = k % n_slots
            cmd = experiment_command(script, prepend_run_slot(slot, affinity_code), run_dir,
                                     run_ID, [*common_args, *runs_args[i]], python_executable)
            print(f"[dry run] slot {slot}{'' if k < n_slots else ' (queued)'}  run_ID {run_ID}"
                  f"  {run_dir}\n    {subprocess.list2cmdline(cmd)}")
            plan.append(RunResult(run_dir, run_ID, slot, None))
        return plan

    os.makedirs(exp_dir, exist_ok=True)
    write_atomic(os.path.join(exp_dir, TREE_FILE),
                  f"script: {script}\naffinity code: {affinity_code} ({n_slots} run slots)\n"
                  f"runs per setting: {runs_per_setting}; variants: {len(variants)}; "
                  f"total runs: {total}\nlauncher pid: {os.getpid()}\n\n"
                  + _tree_text(experiment_title, log_dirs))
    free_slots = deque(range(n_slots))
    running: dict[int, tuple[subprocess.Popen, int, str, int]] = {}  # pid -> proc, slot, ...
    results: dict[int, RunResult] = {}  # launch index -> result
    order: dict[int, int] = {}  # pid -> launch index
    failed: list[RunResult] = []
    watcher = _ChildWatcher()

    def record_progress() -> None:
        lines = [f"launched {len(order)} / {total} runs; finished {len(results)}; "
                 f"failed {len(failed)}; running {len(running)}"]
        lines += [f"  slot {slot}: run_ID {run_ID}  {run_dir}  (pid {pid})"
                  for pid, (_, slot, run_dir, run_ID) in sorted(running.items(),
                                                                key=lambda kv: kv[1][1])]
        write_atomic(os.path.join(exp_dir, NUM_LAUNCHED_FILE), "\n".join(lines) + "\n")

    try:
        while queue or running:
            while queue and free_slots:
                run_dir, i, run_ID = queue.popleft()
                slot = free_slots.popleft()
                proc = launch_experiment(script, slot, affinity_code, run_dir, variants[i],
                                         run_ID, [*common_args, *runs_args[i]],
                                         python_executable, capture_output=capture_output)
                watcher.add(proc)
                running[proc.pid] = (proc, slot, run_dir, run_ID)
                order[proc.pid] = len(order)
                print(f"[launch {len(order)}/{total}] slot {slot}: run_ID {run_ID} of "
                      f"{os.path.relpath(run_dir, exp_dir)} (pid {proc.pid})", flush=True)
                record_progress()
            for proc in watcher.wait_any():
                _, slot, run_dir, run_ID = running.pop(proc.pid)
                free_slots.append(slot)
                result = RunResult(run_dir, run_ID, slot, proc.returncode)
                results[order[proc.pid]] = result
                if proc.returncode != 0:
                    failed.append(result)
                    print(f"[FAILED] run_ID {run_ID} in slot {slot} exited with code "
                          f"{proc.returncode}; log dir {run_dir}"
                          f"{_stderr_tail(run_dir, run_ID) if capture_output else ''}",
                          file=sys.stderr, flush=True)
                else:
                    print(f"[done] slot {slot}: run_ID {run_ID} of "
                          f"{os.path.relpath(run_dir, exp_dir)}", flush=True)
                record_progress()
    except BaseException:
        if running:
            print(f"Stopping {len(running)} running experiment(s)...", file=sys.stderr,
                  flush=True)
            stop_children([proc for proc, *_ in running.values()])
        raise
    finally:
        watcher.close()
    if failed:
        print(f"{len(failed)} of {total} runs failed:", file=sys.stderr)
        for r in failed:
            print(f"  exit {r.returncode}: run_ID {r.run_ID}, slot {r.slot}, {r.log_dir}",
                  file=sys.stderr, flush=True)
    return [results[k] for k in sorted(results)]


def report_sweep(results: Sequence[RunResult], exp_dir: str) -> int:
    """Print how many runs of a finished sweep succeeded and the command that plots and
    tabulates them; return a launch script's exit status (1 when any run failed)."""
    failed = [r for r in results if r.returncode != 0]
    print(f"\n{len(results) - len(failed)} of {len(results)} runs succeeded. Results:\n"
          f"  rlfast plot {exp_dir}", flush=True)
    return 1 if failed else 0
