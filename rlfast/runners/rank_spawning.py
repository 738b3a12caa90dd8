"""Spawning the ranks of a synchronous multi-process run on this machine, and supervising them.

With ``world_size`` > 1 and no launcher (torchrun, Slurm), the calling process forks every
rank (0..N-1) under a :class:`~rlfast.utils.processes.ProcessSupervisor` and joins no process
group itself: it waits on their pipes and sentinels together, so a rank that raises or dies,
before or after the rendezvous, stops every rank at once and raises its traceback here; a
hung rank makes the others' collectives time out (``dist_timeout``), which ends the run the
same way. SIGTERM here stops the ranks (rank 0 saves its final snapshot) and raises
``TrainingInterrupted``.
"""
from __future__ import annotations

import threading
import time
import traceback
from typing import Any

import psutil

from rlfast.utils.distributed import DistEnv
from rlfast.utils.interrupts import SigtermGuard
from rlfast.utils.processes import ChildFailedError, ProcessSupervisor, StopChild

__all__ = ["RankFailedError", "spawn_ranks", "FAILURE_GRACE_S", "SPAWNED_RANKS_JOIN_S"]

FAILURE_GRACE_S = 2.0  # after a rank fails, how long to collect the others' failures
SPAWNED_RANKS_JOIN_S = 5.0  # a stopping rank's time to save rank 0's snapshot and shut down


class RankFailedError(ChildFailedError):
    """A rank of a distributed run raised or died; the message carries its traceback."""


def _rank_child(conn: Any, runner: Any, env: DistEnv) -> None:
    """Entry point of a rank forked by the spawning process: train as that rank, then send
    ``final_result()`` (rank 0's carries the logged returns). A failure is sent as
    ``("rank_error", (time it began, traceback))``: the spawning process reports the rank
    that failed first, not the ranks whose collectives failed because of it."""
    ranks = runner.ranks
    ranks.env, ranks.spawned = env, True
    try:
        result = runner.train()
    except StopChild:
        raise
    except BaseException:  # noqa: BLE001 - every failure must reach the spawning process
        failed_at = ranks.failed_at if ranks.failed_at is not None else time.time()
        conn.send(("rank_error", (failed_at, traceback.format_exc())))
        raise StopChild("failure reported") from None
    conn.send(("done", result))


def spawn_ranks(runner: Any, env: DistEnv, dist_timeout: float) -> dict:
    """Fork every rank of ``env.world_size`` (each runs ``runner.train()`` as its rank) and
    supervise them from this process (see the module docstring). Returns rank 0's
    ``final_result()``; raises :class:`RankFailedError` naming the rank that failed first."""
    envs = [DistEnv(rank=r, local_rank=r, world_size=env.world_size,
                    local_world_size=env.world_size, master_addr=env.master_addr,
                    master_port=env.master_port, launcher="spawn")
            for r in range(env.world_size)]
    supervisor = ProcessSupervisor(label="Rank", error_cls=RankFailedError,
                                   names=[f"Rank {e.rank}" for e in envs],
                                   join_s=SPAWNED_RANKS_JOIN_S, terminate_first=True)
    watch = _DescendantWatch()
    with SigtermGuard():
        try:
            supervisor.start(_rank_child, [dict(runner=runner, env=e) for e in envs],
                             name="rlfast-rank", owner=runner, daemon=False)
            watch.start([p.pid for p in supervisor.processes])
            return _Supervision(supervisor, dist_timeout).wait(env.world_size)
        finally:  # on an error or interrupt: SIGTERM to every rank (rank 0 then saves
            supervisor.stop()  # its final snapshot), SIGKILL after the grace period
            watch.end_survivors()  # the sampler workers of a rank that was killed


class _Supervision:
    """Waits for the ranks' results and reports the first failure."""

    def __init__(self, supervisor: ProcessSupervisor, dist_timeout: float):
        self.supervisor = supervisor
        self.dist_timeout = dist_timeout

    def wait(self, n: int) -> dict:
        """Wait for every rank's result. On the first failure, keep listening for
        ``FAILURE_GRACE_S`` (the other ranks' collectives fail in turn) and raise
        ``RankFailedError`` naming the rank that failed first, with its traceback, the ranks
        that failed after it, and any rank still running (a rank stuck outside the
        collectives, e.g. in a hung environment, makes the others time out)."""
        results: dict[int, Any] = {}
        failures: dict[int, tuple[float, str]] = {}
        waiting = set(range(n))
        grace_end = None
        while waiting:
            timeout = None if grace_end is None else max(0.0, grace_end - time.monotonic())
            for i, kind, payload in self.supervisor.poll(timeout, indexes=waiting):
                waiting.discard(i)
                if kind == "done":
                    results[i] = payload
                elif kind == "rank_error":
                    failures[i] = (float(payload[0]), f"{self._label(i)} raised:\n"
                                                      f"{payload[1]}")
                elif kind == "error":
                    failures[i] = (time.time(), f"{self._label(i)} raised:\n{payload}")
                else:  # "died", or an unexpected message
                    failures[i] = (time.time(), str(payload) if kind == "died" else
                                   f"{self._label(i)} sent {kind!r}")
            if failures and grace_end is None:
                grace_end = time.monotonic() + FAILURE_GRACE_S
            if grace_end is not None and time.monotonic() >= grace_end:
                break
        if failures:
            raise RankFailedError(self._report(failures, waiting))
        return results[0]

    def _label(self, i: int) -> str:
        return f"Rank {i} (pid {self.supervisor.processes[i].pid})"

    def _report(self, failures: dict, running: set) -> str:
        order = sorted(failures, key=lambda i: failures[i][0])
        lines = [failures[order[0]][1].rstrip()]
        for i in order[1:]:
            last = failures[i][1].rstrip().splitlines()[-1]
            lines.append(f"Then rank {i} failed too: {last}")
        timed_out = "timed out" in lines[0].lower() or "timeout" in lines[0].lower()
        for i in sorted(running):
            process = self.supervisor.processes[i]
            line = (f"{self._label(i)} was still running (process status: "
                    f"{_status(process.pid)}) and was stopped.")
            if timed_out:
                line += (f" It sent nothing: a rank stuck outside the collectives (e.g. in an "
                         f"environment step) makes the others time out after "
                         f"dist_timeout={self.dist_timeout:g} s.")
            lines.append(line)
        return "\n".join(lines)


class _DescendantWatch:
    """Remembers the descendants of the spawned ranks (their sampler workers), polling in a
    thread, so that those of a rank killed outright can be ended too."""

    def __init__(self, poll_s: float = 1.0):
        self.poll_s = poll_s
        self.seen: dict[int, psutil.Process] = {}
        self._roots: list[psutil.Process] = []
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, pids: list[int]) -> None:
        """Watch the descendants of the processes ``pids``."""
        for pid in pids:
            try:
                self._roots.append(psutil.Process(pid))
            except psutil.Error:
                pass
        self._thread = threading.Thread(target=self._poll, name="rlfast-rank-watch",
                                        daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        while not self._done.is_set():
            self._record()
            self._done.wait(self.poll_s)

    def _record(self) -> None:
        for root in self._roots:
            try:
                for child in root.children(recursive=True):
                    self.seen.setdefault(child.pid, child)
            except psutil.Error:
                pass

    def end_survivors(self) -> None:
        """Stop polling; terminate (then kill) every remembered descendant still running
        (psutil checks the start time: a reused pid is never signalled)."""
        self._done.set()
        if self._thread is not None:
            self._thread.join()
        alive = [p for p in self.seen.values() if p.is_running()]
        for process in alive:
            try:
                process.terminate()
            except psutil.Error:
                pass
        _, still = psutil.wait_procs(alive, timeout=2.0)
        for process in still:
            try:
                process.kill()
            except psutil.Error:
                pass


def _status(pid: int) -> str:
    try:
        return str(psutil.Process(pid).status())
    except psutil.Error:
        return "gone"
