"""The job a Slurm sweep submits for each run: :class:`SweepRun`, a checkpointable submitit
job that runs the training command as a child process, stops it gracefully when Slurm
preempts the job (or its time runs out), and is requeued to continue through
``rlfast resume``. See :mod:`rlfast.launching.slurm` for the sweep around it.
"""
from __future__ import annotations

import ctypes
import datetime
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

import psutil

from rlfast.launching.children import ChildWatcher
from rlfast.launching.command import experiment_command
from rlfast.launching.run_files import run_output_stem, stderr_tail
from rlfast.utils.logging.context import remove_run_files, snapshot_files

try:  # SweepRun must be a Checkpointable where submitit is installed; the rest checks later.
    from submitit.helpers import Checkpointable as _JobBase
except ImportError:  # pragma: no cover - exercised by running without submitit
    _JobBase = object

__all__ = ["SweepRun", "RunFailedError", "STOP_GRACE_S"]

STOP_GRACE_S = 60.0  # SIGTERM to SIGKILL; submitit's signal comes 90 s before Slurm's kill.
PR_SET_PDEATHSIG = 1


class RunFailedError(RuntimeError):
    """The training command of a Slurm job exited with a non-zero status."""


def _job_env(name: str, default: str) -> str:
    """A submitit JobEnvironment property (job_id, global_rank) inside a job, else default."""
    try:
        import submitit
        return str(getattr(submitit.JobEnvironment(), name))
    except Exception:  # not inside a submitit job
        return default


def _load_prctl() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl  # libc's, linked into Python
    except (OSError, AttributeError):
        return None


def _child_setup(preempt_signum: int | None, parent_pid: int, prctl: Any):
    """``preexec_fn`` for the training child: ignore submitit's preemption signal (Slurm
    signals every process of the job; only the job process may act on it), and get SIGTERM
    when the job process dies (Linux), so that the child is never orphaned."""
    def setup() -> None:
        if preempt_signum is not None:
            signal.signal(preempt_signum, signal.SIG_IGN)
        if prctl is not None:
            prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
            if os.getppid() != parent_pid:  # the job process died before prctl took effect
                os._exit(143)
    return setup


def _preempt_signal() -> int | None:
    try:
        from submitit.core.job_environment import JobEnvironment
        return int(JobEnvironment._usr_sig())
    except Exception:  # no submitit, or an unknown SUBMITIT_PREEMPT_SIGNAL
        return None


def _stop_child(proc: subprocess.Popen | None, grace_s: float) -> None:
    """SIGTERM ``proc`` (a run saves its final snapshot and stops its workers), wait up to
    ``grace_s``, then SIGKILL it; its descendants that outlive it are killed at once.
    Nothing happens when it has already exited."""
    if proc is None or proc.poll() is not None:
        return
    try:
        descendants = psutil.Process(proc.pid).children(recursive=True)
    except psutil.Error:
        descendants = []
    proc.terminate()
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    for p in descendants:  # a run stops its own workers: any still here are strays
        try:
            p.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(descendants, timeout=1.0)


class SweepRun(_JobBase):
    """One run of a sweep as a checkpointable submitit job.

    Calling it runs the training command in a child process and raises ``RunFailedError``
    (with the end of the run's stderr) when that exits non-zero, so submitit marks the job
    failed. With ``resume`` set, or in a job Slurm itself requeued (``SLURM_RESTART_COUNT``),
    a run directory holding a snapshot is continued with ``python -m rlfast resume RUN_DIR``,
    and one without is started again from scratch after its old files are removed.
    ``checkpoint`` (submitit calls it on preemption or timeout) stops the child gracefully
    and returns the resuming copy for submitit to requeue.
    """

    def __init__(self, script: str, slot_code: str, log_dir: str, run_ID: int,
                 args: Sequence = (), python_executable: str | None = None,
                 resume: bool = False, stop_grace_s: float = STOP_GRACE_S) -> None:
        self.script = str(script)
        self.slot_code = slot_code
        self.log_dir = str(log_dir)
        self.run_ID = int(run_ID)
        self.args = [str(a) for a in args]
        self.python_executable = python_executable or sys.executable
        self.resume = bool(resume)
        self.stop_grace_s = float(stop_grace_s)
        self._proc: subprocess.Popen | None = None

    @property
    def run_dir(self) -> str:
        """Where the training script writes: ``LOG_DIR/run_<run_ID>``."""
        return os.path.join(self.log_dir, f"run_{self.run_ID}")

    def start_command(self) -> list[str]:
        """``python SCRIPT SLOT_CODE LOG_DIR RUN_ID *ARGS`` (no taskset: Slurm binds the job)."""
        return experiment_command(self.script, self.slot_code, self.log_dir, self.run_ID,
                                  self.args, self.python_executable, pin=False)

    def resume_command(self) -> list[str]:
        """``python -m rlfast resume LOG_DIR/run_<run_ID>``."""
        return [self.python_executable, "-m", "rlfast", "resume", self.run_dir]

    def resumed(self) -> "SweepRun":
        """A copy that resumes this run when it is called."""
        return SweepRun(self.script, self.slot_code, self.log_dir, self.run_ID, self.args,
                        self.python_executable, resume=True, stop_grace_s=self.stop_grace_s)

    def _note(self, message: str) -> None:
        """A line in the run's stdout file, where the job's starts and stops are traced."""
        stamp = datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S")
        with open(f"{run_output_stem(self.log_dir, self.run_ID)}.stdout.txt", "a",
                  encoding="utf-8") as f:
            f.write(f"[rlfast.slurm {stamp}] job {_job_env('job_id', '?')}: {message}\n")

    def __call__(self) -> str:
        if _job_env("global_rank", "0") != "0":
            return self.run_dir  # other tasks of a multi-node job: the first one trains
        os.makedirs(self.log_dir, exist_ok=True)
        requeued = self.resume or int(os.environ.get("SLURM_RESTART_COUNT") or 0) > 0
        if requeued and snapshot_files(self.run_dir):
            command, how = self.resume_command(), "resuming from the last snapshot"
        else:
            if requeued:
                removed = remove_run_files(self.run_dir)
                self._note(f"no snapshot to resume from; starting again (removed "
                           f"{', '.join(removed) or 'nothing'})")
            command, how = self.start_command(), "starting"
        self._note(f"{how}: {subprocess.list2cmdline(command)}")
        stem = run_output_stem(self.log_dir, self.run_ID)
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        # The child is one process of this job, not a rank of the job's srun step: without
        # SLURM_PROCID, rlfast (train, resume) does not take the step's tasks for its ranks.
        env.pop("SLURM_PROCID", None)
        setup = _child_setup(_preempt_signal(), os.getpid(), _load_prctl())
        watcher = ChildWatcher()  # a blocking wait during which the signal handler can run
        try:
            with open(f"{stem}.stdout.txt", "ab") as out, \
                    open(f"{stem}.stderr.txt", "ab") as err:
                self._proc = subprocess.Popen(command, stdout=out, stderr=err,
                                              stdin=subprocess.DEVNULL, env=env,
                                              preexec_fn=setup)
            watcher.add(self._proc)
            watcher.wait_any()
        finally:  # also on KeyboardInterrupt (cancel) and on submitit's requeue exit
            watcher.close()
            _stop_child(self._proc, self.stop_grace_s)
        returncode = self._proc.returncode
        self._proc = None
        if returncode != 0:
            why = (" (SIGTERM: the job was cancelled or preempted; a requeued job resumes "
                   "from the last snapshot)" if returncode in (143, -signal.SIGTERM) else "")
            self._note(f"exited with code {returncode}")
            raise RunFailedError(f"run_ID {self.run_ID} in {self.log_dir} exited with code "
                                 f"{returncode}{why}; command: "
                                 f"{subprocess.list2cmdline(command)}"
                                 f"{stderr_tail(self.log_dir, self.run_ID, n_lines=10)}")
        self._note("finished")
        return self.run_dir

    def checkpoint(self, *args: Any, **kwargs: Any) -> Any:
        """Stop the training child gracefully (SIGTERM: final snapshot, exit 143; SIGKILL
        after ``stop_grace_s``) and return the resuming copy for submitit to requeue."""
        from submitit.helpers import DelayedSubmission
        if self._proc is not None and self._proc.poll() is None:
            self._note(f"preempted or timed out: stopping the run (SIGTERM, up to "
                       f"{self.stop_grace_s:g} s) to requeue it")
            _stop_child(self._proc, self.stop_grace_s)
            self._note(f"stopped with code {self._proc.returncode}; requeueing to resume")
        return DelayedSubmission(self.resumed())

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_proc"] = None  # a process handle does not travel to the requeued job
        return state

    def __repr__(self) -> str:
        return (f"SweepRun(run_ID={self.run_ID}, log_dir={self.log_dir!r}, "
                f"resume={self.resume})")
