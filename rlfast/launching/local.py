"""The local backend of ``run_experiments``: a sweep's runs queued over the run slots of one
machine.

Each run starts with ``launch_experiment`` as soon as one of the affinity code's run slots is
free (never two runs in one slot); the launcher waits on its children with a blocking wait
(no polling) and keeps ``num_launched.txt`` and ``experiments_tree.txt`` in the experiment
directory so a sweep can be watched from another terminal.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from collections import deque

from rlfast.launching.children import ChildWatcher, stop_children
from rlfast.launching.command import experiment_command, launch_experiment
from rlfast.launching.plan import PlannedRun, SweepPlan
from rlfast.launching.report import RunResult, print_failures
from rlfast.launching.run_files import (NUM_LAUNCHED_FILE, run_output_stem, write_atomic,
                                        write_tree_file)
from rlfast.utils.affinity import prepend_run_slot

__all__ = ["run_local_sweep", "print_local_plan", "LocalSweep", "stderr_excerpt",
           "is_error_line"]

# A line that states an error: a Python exception line (``ValueError: ...``,
# ``rlfast.experiments.config.ConfigError: ...``, a bare ``KeyboardInterrupt``) or a program's
# ``error:`` line (``rlfast: error: ...``, ``Fatal Python error: ...``).
_ERROR_LINE = re.compile(r"^\s*[\w.]*(Error|Exception|Interrupt|Exit)\w*(:|$)|(?i:\berror:)")
_MAX_LINE = 500  # characters of one stderr line shown in a failure report


def is_error_line(line: str) -> bool:
    """Whether a line of a run's stderr states an error (an exception line, or an
    ``error:`` line): the line a failure report must show even when more output follows."""
    return bool(_ERROR_LINE.search(line))


def stderr_excerpt(log_dir: str, run_ID: int, n_lines: int = 5) -> str:
    """The end of a failure report: the last ``n_lines`` of the run's stderr file, preceded
    by its last error line (see :func:`is_error_line`) when that lies further up, each on its
    own indented ``| `` line (empty when the file cannot be read). A bad ``--set`` key's
    error is followed by the list of valid keys, and a traceback by whatever the run printed
    while shutting down: the tail alone would hide what went wrong."""
    try:
        with open(f"{run_output_stem(log_dir, run_ID)}.stderr.txt", "r", encoding="utf-8",
                  errors="replace") as f:
            lines = f.read().rstrip().splitlines()
    except OSError:
        return ""
    start = max(len(lines) - n_lines, 0)
    shown = lines[start:]
    errors = [k for k, line in enumerate(lines) if is_error_line(line)]
    if errors and errors[-1] < start:
        gap = start - errors[-1] - 1
        shown = [lines[errors[-1]]] + ([f"... ({gap} more lines)"] if gap else []) + shown
    return "".join(f"\n    | {line if len(line) <= _MAX_LINE else line[:_MAX_LINE] + ' ...'}"
                   for line in shown)


def run_local_sweep(plan: SweepPlan, capture_output: bool = True,
                    dry_run: bool = False) -> list[RunResult]:
    """Run every run of ``plan`` on this machine and return one ``RunResult`` per run in
    launch order; with ``dry_run``, only print and return the plan (see
    :func:`print_local_plan`)."""
    if dry_run:
        return print_local_plan(plan)
    write_tree_file(plan.exp_dir,
                    f"script: {plan.script}\naffinity code: {plan.affinity_code} "
                    f"({plan.n_slots} run slots)\nruns per setting: {plan.runs_per_setting}; "
                    f"variants: {len(plan.log_dirs)}; total runs: {len(plan.runs)}",
                    plan.experiment_title, plan.log_dirs)
    return LocalSweep(plan, capture_output).run()


def print_local_plan(plan: SweepPlan) -> list[RunResult]:
    """Print each run's nominal slot and command and return them as ``RunResult``s with
    ``returncode=None``; nothing is started or written."""
    print(f"[dry run] {len(plan.runs)} runs of {plan.script} over {plan.n_slots} run slot(s) "
          f"of {plan.affinity_code}; experiment dir {plan.exp_dir}")
    results = []
    for k, run in enumerate(plan.runs):
        slot = k % plan.n_slots
        command = experiment_command(plan.script, prepend_run_slot(slot, plan.affinity_code),
                                     run.log_dir, run.run_ID, run.args, plan.python_executable)
        print(f"[dry run] slot {slot}{'' if k < plan.n_slots else ' (queued)'}  run_ID "
              f"{run.run_ID}  {run.log_dir}\n    {subprocess.list2cmdline(command)}")
        results.append(RunResult(run.log_dir, run.run_ID, slot, None))
    return results


class LocalSweep:
    """The runs of a plan as child processes, at most one per run slot at a time.

    A run exiting non-zero is reported on stderr (log dir, run_ID, slot, exit code, the
    last error line and the end of its stderr file: :func:`stderr_excerpt`) and the others
    go on. On KeyboardInterrupt (or any error) every
    running child and its descendants are stopped and the exception re-raised.
    """

    def __init__(self, plan: SweepPlan, capture_output: bool = True) -> None:
        self.plan = plan
        self.capture_output = capture_output
        self.queue = deque(plan.runs)
        self.free_slots = deque(range(plan.n_slots))
        self.running: dict[int, tuple[subprocess.Popen, int, PlannedRun]] = {}  # by pid
        self.launch_index: dict[int, int] = {}  # pid -> launch index
        self.results: dict[int, RunResult] = {}  # launch index -> result
        self.failed: list[RunResult] = []

    def run(self) -> list[RunResult]:
        """Start runs as slots free up until every run has finished; return the results in
        launch order (a failure summary is printed on stderr at the end)."""
        watcher = ChildWatcher()
        try:
            while self.queue or self.running:
                while self.queue and self.free_slots:
                    watcher.add(self._start_next())
                for proc in watcher.wait_any():
                    self._finish(proc)
        except BaseException:
            self._stop_running()
            raise
        finally:
            watcher.close()
        print_failures(self.failed, len(self.plan.runs),
                       lambda r: f"exit {r.returncode}: run_ID {r.run_ID}, slot {r.slot}, "
                                 f"{r.log_dir}")
        return [self.results[k] for k in sorted(self.results)]

    def _start_next(self) -> subprocess.Popen:
        plan, run, slot = self.plan, self.queue.popleft(), self.free_slots.popleft()
        proc = launch_experiment(plan.script, slot, plan.affinity_code, run.log_dir,
                                 run.variant, run.run_ID, run.args, plan.python_executable,
                                 capture_output=self.capture_output)
        self.running[proc.pid] = (proc, slot, run)
        self.launch_index[proc.pid] = len(self.launch_index)
        print(f"[launch {len(self.launch_index)}/{len(plan.runs)}] slot {slot}: run_ID "
              f"{run.run_ID} of {os.path.relpath(run.log_dir, plan.exp_dir)} (pid {proc.pid})",
              flush=True)
        self._record_progress()
        return proc

    def _finish(self, proc: subprocess.Popen) -> None:
        _, slot, run = self.running.pop(proc.pid)
        self.free_slots.append(slot)
        result = RunResult(run.log_dir, run.run_ID, slot, proc.returncode)
        self.results[self.launch_index[proc.pid]] = result
        if proc.returncode != 0:
            self.failed.append(result)
            tail = stderr_excerpt(run.log_dir, run.run_ID) if self.capture_output else ""
            print(f"[FAILED] run_ID {run.run_ID} in slot {slot} exited with code "
                  f"{proc.returncode}; log dir {run.log_dir}{tail}", file=sys.stderr,
                  flush=True)
        else:
            print(f"[done] slot {slot}: run_ID {run.run_ID} of "
                  f"{os.path.relpath(run.log_dir, self.plan.exp_dir)}", flush=True)
        self._record_progress()

    def _record_progress(self) -> None:
        """Rewrite ``num_launched.txt``: the counts and the run in each busy slot."""
        lines = [f"launched {len(self.launch_index)} / {len(self.plan.runs)} runs; finished "
                 f"{len(self.results)}; failed {len(self.failed)}; running {len(self.running)}"]
        lines += [f"  slot {slot}: run_ID {run.run_ID}  {run.log_dir}  (pid {pid})"
                  for pid, (_, slot, run) in sorted(self.running.items(),
                                                    key=lambda item: item[1][1])]
        write_atomic(os.path.join(self.plan.exp_dir, NUM_LAUNCHED_FILE), "\n".join(lines) + "\n")

    def _stop_running(self) -> None:
        if self.running:
            print(f"Stopping {len(self.running)} running experiment(s)...", file=sys.stderr,
                  flush=True)
            stop_children([proc for proc, _, _ in self.running.values()])
