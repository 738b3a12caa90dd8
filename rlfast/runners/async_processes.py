"""The children of an asynchronous run: the sampler process and the optional replay copier.

Both are started by the process supervisor (``rlfast.utils.processes``) from the master, which
runs the optimizer. They talk to the master through their pipes (messages below) and to each
other through :class:`AsyncCtrl`'s semaphores, so the master is never in the way of a batch:

- sampler -> master: ``("ready", worker pids)`` once built, ``("batch", (itr, completed
  trajectory infos, update count of the parameters it acted with, workers restarted so
  far))`` after each batch,
  ``("eval", (itr, trajectory infos, seconds))`` after each evaluation, ``("finished",
  n_itr)`` after the last batch; it then evaluates once more on the master's
  ``("final_eval",)`` (after the optimizer's last updates) and waits for the master's quit.
- copier -> master: ``("copied", slot)`` after each batch appended to replay.

Double buffer. Batch ``itr`` goes to slot ``itr % 2``. The sampler takes ``free[k]`` before
writing slot ``k``; whoever copies the slot into replay (the copier after ``ready[k]``, or the
master itself on the batch message) releases ``free[k]``. So the sampler writes one slot while
the other is copied, and waits only when copying falls a whole batch behind.

The master holds its children through :class:`AsyncChildren`: it starts them, waits until the
sampler is built, passes their messages on, and stops them (and any sampler worker left
behind) on every exit path.

Ctrl-C is the master's: both children ignore SIGINT (so does every sampler worker, forked
from the sampler process) and are stopped by the master's shutdown. A child whose master died
sees end-of-file on its pipe or its parent gone while waiting on a semaphore, and exits.
"""
from __future__ import annotations

import os
import signal
import time
from typing import Any

import psutil

from rlfast.agents.param_sharing import AsyncParams
from rlfast.samplers.parallel.worker import set_worker_affinity
from rlfast.utils.processes import (ChildFailedError, Deadline, ProcessSupervisor, StopChild,
                                    acquire_while_parent_alive)
from rlfast.utils.seed import set_seed

__all__ = ["AsyncChildren", "AsyncCtrl", "AsyncRunError", "async_child"]

_STARTUP_S = 300.0


class AsyncRunError(ChildFailedError):
    """The sampler process (or one of its workers) or the replay copier failed; the message
    carries the failing process's traceback."""


class AsyncCtrl:
    """Semaphores and flags shared by the master, the sampler process and the copier.

    ``free[k]``: slot ``k`` may be written (starts released). ``ready[k]``: slot ``k`` holds a
    batch for the copier (only with a copier process). ``stop``: set by the master's shutdown,
    releases children blocked on a semaphore.
    """

    def __init__(self, ctx, copier_process: bool):
        self.free = [ctx.Semaphore(1), ctx.Semaphore(1)]
        self.ready = [ctx.Semaphore(0), ctx.Semaphore(0)] if copier_process else None
        self.stop = ctx.RawValue("b", False)


def _quit_requested(conn) -> bool:
    """A quit message from the master is waiting (or the master is gone)."""
    try:
        while conn.poll(0):
            message = conn.recv()
            if message and message[0] == "quit":
                return True
    except (EOFError, OSError):
        return True
    return False


def _serve_final_evaluation(conn, sampler, agent, params, itr: int) -> None:
    """After the last batch: on the master's ``("final_eval",)`` (sent once the optimizer
    made its last updates) evaluate the newest parameters; leave on quit."""
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        if not message or message[0] == "quit":
            return
        if message[0] == "final_eval":
            params.recv(agent)
            _evaluate(conn, sampler, agent, itr)


def _evaluate(conn, sampler, agent, itr: int) -> None:
    agent.eval_mode(itr)
    start = time.monotonic()
    traj_infos = sampler.evaluate_agent(itr)
    conn.send(("eval", (itr, traj_infos, time.monotonic() - start)))


def sampler_process(conn, sampler, agent, params: AsyncParams, affinity: dict, seed: int,
                    n_itr: int, eval_itrs: int, ctrl: AsyncCtrl, start_itr: int = 0) -> None:
    """Body of the sampler process: build the sampler (its environments, workers and the
    agent's own model), then collect ``n_itr`` batches into the double buffer, pulling the
    optimizer's newest parameters from the board ``params`` before each; with
    ``eval_itrs > 0`` evaluate before the first batch, every ``eval_itrs`` batches and, when
    the master asks, after the last. A resumed run starts at ``start_itr`` (and has evaluated
    the untrained agent long ago)."""
    parent = os.getppid()
    try:
        pinned = affinity.get("master_cpus") if affinity.get("set_affinity", True) else None
        set_worker_affinity(pinned, affinity.get("master_torch_threads", 1))
        set_seed(seed)
        sampler.initialize(agent, affinity=affinity, seed=seed, bootstrap_value=False)
        if sampler.agent_in_sampler_process:
            agent.to_device(affinity.get("cuda_idx"))
        conn.send(("ready", [p.pid for p in getattr(sampler, "workers", [])]))
        if eval_itrs and start_itr == 0:
            _evaluate(conn, sampler, agent, 0)
        for itr in range(start_itr, n_itr):
            slot = itr % 2
            acquire_while_parent_alive(ctrl.free[slot], parent, ctrl.stop)
            if _quit_requested(conn):
                return
            params.recv(agent)
            agent.sample_mode(itr)
            _, traj_infos = sampler.obtain_samples(itr, slot)
            if ctrl.ready is not None:
                ctrl.ready[slot].release()
            conn.send(("batch", (itr, traj_infos, params.sampler_updates,
                                 sampler.worker_restarts)))
            if eval_itrs and (itr + 1) % eval_itrs == 0 and itr < n_itr - 1:
                params.recv(agent)
                _evaluate(conn, sampler, agent, itr)
        conn.send(("finished", n_itr))
        _serve_final_evaluation(conn, sampler, agent, params, n_itr - 1)
    finally:
        sampler.shutdown()


def copier_process(conn, slots: list, samples_to_buffer, replay_buffer: Any,
                   ctrl: AsyncCtrl, first_slot: int = 0) -> None:
    """Body of the replay copier: append each finished slot to the shared replay buffer
    (under its write lock), in batch order (from ``first_slot``: a resumed run's first batch
    may be odd), then free the slot for the sampler."""
    parent = os.getppid()
    slot = first_slot
    while True:
        acquire_while_parent_alive(ctrl.ready[slot], parent, ctrl.stop)
        replay_buffer.append_samples(samples_to_buffer(slots[slot]))
        ctrl.free[slot].release()
        conn.send(("copied", slot))
        slot = 1 - slot


def async_child(conn, role: str, **kwargs: Any) -> None:
    """The supervisor's target for both children: ignore SIGINT (the master owns Ctrl-C),
    then run the ``role``'s body (``"sampler"`` or ``"copier"``)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    body = {"sampler": sampler_process, "copier": copier_process}[role]
    try:
        body(conn, **kwargs)
    except StopChild:
        pass


class AsyncChildren:
    """The master's handle on its children: :meth:`launch` starts the sampler process (and
    the copier) and waits until the sampler is built; :meth:`receive` passes their messages
    on (a failed child raises :class:`AsyncRunError` with its traceback); :meth:`stop` stops
    them and terminates any sampler worker left behind (its parent was killed)."""

    def __init__(self) -> None:
        self.supervisor: ProcessSupervisor | None = None
        self.ctrl: AsyncCtrl | None = None
        self.early: list = []  # messages that came with the sampler's "ready"
        self._grandchildren: list = []

    def launch(self, ctx: Any, sampler: dict, copier: dict | None, owner: Any) -> None:
        """Start the sampler process with the keyword arguments ``sampler`` of
        :func:`sampler_process` (its ``ctrl`` added) and, unless ``copier`` is None, the
        copier with those of :func:`copier_process`; wait for the sampler's "ready" (up to
        the sampler's ``worker_timeout``, at least five minutes; ``"off"``: forever)."""
        self.ctrl = AsyncCtrl(ctx, copier_process=copier is not None)
        children = [dict(role="sampler", ctrl=self.ctrl, **sampler)]
        names = ["Async sampler process"]
        if copier is not None:
            children.append(dict(role="copier", ctrl=self.ctrl, **copier))
            names.append("Replay copier process")
        self.supervisor = ProcessSupervisor(label="Async child", error_cls=AsyncRunError,
                                            stop_flags=[self.ctrl.stop], names=names)
        self.supervisor.start(async_child, children, name="rlfast-async", owner=owner,
                              daemon=False)
        timeout = sampler["sampler"].worker_timeout
        deadline = Deadline(None if timeout is None else max(_STARTUP_S, float(
            timeout if isinstance(timeout, (int, float)) else 0)),
            "the sampler process's startup timeout (sampler.worker_timeout='off' waits forever)")
        self.early = []
        while True:
            messages = self.supervisor.receive(deadline.wait_s(1.0))
            ready = [m for m in messages if m[1] == "ready"]
            self.early.extend(m for m in messages if m[1] != "ready")
            if ready:
                self._grandchildren = [_process(pid) for pid in ready[0][2]]
                return
            if deadline.expired():
                self.supervisor.fail_silent([0], "sent no 'ready'", deadline)

    def receive(self, timeout: float) -> list:
        """The children's messages, ``(index, kind, payload)``, waiting up to ``timeout``
        seconds for one."""
        return self.supervisor.receive(timeout)

    def free_slot(self, slot: int) -> None:
        """The master appended double-buffer ``slot`` to replay: the sampler may refill it."""
        self.ctrl.free[slot].release()

    def request_final_eval(self) -> None:
        """Ask the sampler process to evaluate the newest parameters once more."""
        self.supervisor.send_all(("final_eval",), indexes=[0])

    def stop(self) -> None:
        """Stop the children (the sampler process stops its workers), then terminate any
        sampler worker left behind."""
        if self.supervisor is not None:
            self.supervisor.stop()
        for process in self._grandchildren:
            _end(process)
        self._grandchildren = []


def _process(pid: int) -> psutil.Process | None:
    try:
        return psutil.Process(pid)
    except psutil.Error:
        return None


def _end(process: psutil.Process | None) -> None:
    """Terminate a sampler worker left behind (same pid and start time: never another
    process that reused the pid), then kill it if it does not exit."""
    if process is None:
        return
    try:
        if process.is_running():
            process.terminate()
            process.wait(2)
    except psutil.TimeoutExpired:
        try:
            process.kill()
        except psutil.Error:
            pass
    except psutil.Error:
        pass
