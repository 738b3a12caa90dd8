"""The one entry point of every parallel sampler worker process.

A worker builds its environments and collectors, reports ready, then serves commands from
the master over its own pipe: ``("sample", itr, state, db_idx)`` collects a batch into the
shared buffer, ``("eval", itr, state, db_idx)`` runs evaluation, ``("quit",)`` exits;
``state`` is the agent's algorithm-given sampling settings and ``db_idx`` the async samplers'
double-buffer slot to write (None for the synchronous samplers). Each reply carries the
trajectory infos completed meanwhile. The process supervisor
(``rlfast.utils.processes.child_main``) wraps this function: any exception reaches the master
with its traceback, and a worker whose master has died sees end-of-file on the pipe and exits.
"""
from __future__ import annotations

import torch

from rlfast.samplers.base import make_envs
from rlfast.samplers.parallel.status import Phase
from rlfast.utils.processes import StopChild, receive_command
from rlfast.utils.seed import set_seed

StopWorker = StopChild  # raised inside a worker to leave quietly at shutdown


def set_worker_affinity(cpus, torch_threads: int | None) -> None:
    """Pin this process to ``cpus`` (where the OS allows) and set torch's thread count."""
    if cpus:
        try:
            import psutil
            proc = psutil.Process()
            if hasattr(proc, "cpu_affinity"):
                proc.cpu_affinity(list(cpus))
        except (ImportError, OSError, ValueError):
            pass  # e.g. macOS has no affinity API, or a cpu is not available in this container
    torch.set_num_threads(max(1, int(torch_threads or 1)))


def sampling_process(conn, common_kwargs: dict, worker_kwargs: dict) -> None:
    """Body of every parallel sampler worker (run by the process supervisor).

    With ``common_kwargs["status_table"]`` (a :class:`~rlfast.samplers.parallel.status.
    StatusTable`), the worker and its collectors publish what they are doing in row ``rank``.
    """
    c, w = common_kwargs, worker_kwargs
    envs, eval_envs = [], []
    table = c.get("status_table")
    status = table.worker(w["rank"]) if table is not None else None

    def publish(phase: Phase, itr: int | None = None) -> None:
        if status is not None:
            status.set(phase, itr)

    try:
        set_worker_affinity(w.get("cpus"), w.get("torch_threads", 1))
        set_seed(w["seed"])
        publish(Phase.BUILDING_ENVS)
        envs = make_envs(c["EnvCls"], w["n_envs"], c["env_kwargs"], w["env_seed"],
                         w.get("first_env", w["env_ranks"][0]))
        agent = c.get("agent")
        collector = c["CollectorCls"](
            rank=w["rank"], envs=envs, samples_np=w["samples_np"], batch_T=c["batch_T"],
            TrajInfoCls=c["TrajInfoCls"], agent=agent, sync=w.get("sync"),
            step_buffer_np=w.get("step_buffer_np"), global_B=c["global_B"],
            env_ranks=w["env_ranks"], status=status)
        eval_collector = None
        if w["eval_n_envs"] > 0:
            publish(Phase.BUILDING_EVAL_ENVS)
            eval_envs = make_envs(c["EnvCls"], w["eval_n_envs"], c["eval_env_kwargs"],
                                  w["eval_env_seed"], 0)
            eval_collector = c["eval_CollectorCls"](
                rank=w["rank"], envs=eval_envs, TrajInfoCls=c["TrajInfoCls"],
                max_T=c["eval_max_T"], agent=agent, sync=w.get("sync"),
                step_buffer_np=w.get("eval_step_buffer_np"),
                max_trajectories=w["eval_max_trajectories"], status=status)
        agent_inputs, traj_infos = collector.start_envs(c["max_decorrelation_steps"])
        collector.start_agent()
        publish(Phase.REPLYING, -1)
        conn.send(("ready", None))
        while True:
            collector.reset_if_needed(agent_inputs)
            publish(Phase.WAITING_COMMAND)
            message = receive_command(conn)
            if message is None:
                break  # quit, or the master is gone
            command, itr, state, db_idx = message
            if state and agent is not None:
                agent.load_sampling_state(state)
            if db_idx is not None:  # async samplers: this batch's slot of the double buffer
                collector.samples_np = w["slots_np"][db_idx]
            if command == "eval":
                completed = [] if eval_collector is None else eval_collector.collect_evaluation(itr)
            else:
                agent_inputs, traj_infos, completed = collector.collect_batch(
                    agent_inputs, traj_infos, itr)
            publish(Phase.REPLYING, itr)
            conn.send(("done", completed))
    finally:
        for env in envs + eval_envs:
            try:
                env.close()
            except Exception:  # noqa: BLE001 - closing must not mask the real error
                pass
