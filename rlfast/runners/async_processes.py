"""The children of an asynchronous run: the sampler process and the optional replay copier.

Both are started by the process supervisor (``rlfast.utils.processes``) from the master, which
runs the optimizer. They talk to the master through their pipes (messages below) and to each
other through :class:`AsyncCtrl`'s semaphores, so the master is never in the way of a batch:

- sampler -> master: ``("ready", worker pids)`` once built, ``("batch", (itr, completed
  trajectory infos, update count of the parameters it acted with))`` after each batch,
  ``("eval", (itr, trajectory infos, seconds))`` after each evaluation, ``("finished",
  n_itr)`` after the last batch; it then evaluates once more on the master's
  ``("final_eval",)`` (after the optimizer's last updates) and waits for the master's quit.
- copier -> master: ``("copied", slot)`` after each batch appended to replay.

Double buffer. Batch ``itr`` goes to slot ``itr % 2``. The sampler takes ``free[k]`` before
writing slot ``k``; whoever copies the slot into replay (the copier after ``ready[k]``, or the
master itself on the batch message) releases ``free[k]``. So the sampler writes one slot while
the other is copied, and waits only when copying falls a whole batch behind.

Ctrl-C is the master's: both children ignore SIGINT (so does every sampler worker, forked
from the sampler process) and are stopped by the master's shutdown. A child whose master died
sees end-of-file on its pipe or its parent gone while waiting on a semaphore, and exits.
"""
from __future__ import annotations

import os
import signal
import time
from typing import Any

from rlfast.samplers.parallel.worker import set_worker_affinity
from rlfast.utils.processes import StopChild, acquire_while_parent_alive
from rlfast.utils.seed import set_seed

__all__ = ["AsyncCtrl", "async_child"]


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


def _serve_final_evaluation(conn, sampler, agent, itr: int) -> None:
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
            agent.recv_shared_memory()
            _evaluate(conn, sampler, agent, itr)


def _evaluate(conn, sampler, agent, itr: int) -> None:
    agent.eval_mode(itr)
    start = time.monotonic()
    traj_infos = sampler.evaluate_agent(itr)
    conn.send(("eval", (itr, traj_infos, time.monotonic() - start)))


def sampler_process(conn, sampler, agent, affinity: dict, seed: int, n_itr: int,
                    eval_itrs: int, ctrl: AsyncCtrl, start_itr: int = 0) -> None:
    """Body of the sampler process: build the sampler (its environments, workers and the
    agent's own model), then collect ``n_itr`` batches into the double buffer, pulling the
    optimizer's newest parameters before each; with ``eval_itrs > 0`` evaluate before the
    first batch, every ``eval_itrs`` batches and, when the master asks, after the last. A
    resumed run starts at ``start_itr`` (and has evaluated the untrained agent long ago)."""
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
            agent.recv_shared_memory()
            agent.sample_mode(itr)
            _, traj_infos = sampler.obtain_samples(itr, slot)
            if ctrl.ready is not None:
                ctrl.ready[slot].release()
            conn.send(("batch", (itr, traj_infos, agent.sampler_param_updates)))
            if eval_itrs and (itr + 1) % eval_itrs == 0 and itr < n_itr - 1:
                agent.recv_shared_memory()
                _evaluate(conn, sampler, agent, itr)
        conn.send(("finished", n_itr))
        _serve_final_evaluation(conn, sampler, agent, n_itr - 1)
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
