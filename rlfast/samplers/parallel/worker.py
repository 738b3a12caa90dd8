"""The one entry point of every parallel sampler worker process.

A worker builds its environments and collectors, then loops: wait for the master at
``barrier_in``, collect a batch (or run evaluation), signal completion at ``barrier_out``. Any
exception is sent to the master with its traceback, and the barriers are aborted so the master
raises at once instead of waiting.
"""
from __future__ import annotations

import os
import threading
import traceback

import torch

from rlfast.utils.seed import set_seed


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


def sampling_process(common_kwargs: dict, worker_kwargs: dict) -> None:
    """Target of ``multiprocessing.Process`` for all parallel samplers."""
    c, w = common_kwargs, worker_kwargs
    ctrl = c["ctrl"]
    envs, eval_envs = [], []
    try:
        set_worker_affinity(w.get("cpus"), w.get("torch_threads", 1))
        set_seed(w["seed"])
        envs = c["make_envs"](w["n_envs"], c["env_kwargs"], w["env_seed"], w["env_ranks"][0])
        collector = c["CollectorCls"](
            rank=w["rank"], envs=envs, samples_np=w["samples_np"], batch_T=c["batch_T"],
            TrajInfoCls=c["TrajInfoCls"], agent=c.get("agent"), sync=w.get("sync"),
            step_buffer_np=w.get("step_buffer_np"), global_B=c["global_B"],
            env_ranks=w["env_ranks"])
        eval_collector = None
        if w["eval_n_envs"] > 0:
            eval_envs = c["make_envs"](w["eval_n_envs"], c["eval_env_kwargs"], w["eval_env_seed"], 0)
            eval_collector = c["eval_CollectorCls"](
                rank=w["rank"], envs=eval_envs, TrajInfoCls=c["TrajInfoCls"],
                traj_infos_queue=c["eval_traj_infos_queue"], max_T=c["eval_max_T"],
                agent=c.get("agent"), sync=w.get("sync"), step_buffer_np=w.get("eval_step_buffer_np"),
                max_trajectories=w["eval_max_trajectories"])
        agent_inputs, traj_infos = collector.start_envs(c["max_decorrelation_steps"])
        collector.start_agent()
        ctrl.barrier_out.wait()  # initialization finished
        while True:
            collector.reset_if_needed(agent_inputs)
            ctrl.barrier_in.wait()
            if ctrl.quit.value:
                break
            itr = ctrl.itr.value
            if ctrl.do_eval.value:
                eval_collector.collect_evaluation(itr)
                c["eval_traj_infos_queue"].put(None)  # sentinel: this worker is done
            else:
                agent_inputs, traj_infos, completed = collector.collect_batch(
                    agent_inputs, traj_infos, itr)
                for info in completed:
                    c["traj_infos_queue"].put(info)
                c["traj_infos_queue"].put(None)
            ctrl.barrier_out.wait()
    except threading.BrokenBarrierError:
        pass  # the master (or another worker) aborted the run; exit quietly
    except BaseException:  # noqa: BLE001 - every failure must reach the master
        c["error_queue"].put((w["rank"], os.getpid(), traceback.format_exc()))
        ctrl.barrier_in.abort()
        ctrl.barrier_out.abort()
    finally:
        for env in envs + eval_envs:
            try:
                env.close()
            except Exception:  # noqa: BLE001 - closing must not mask the real error
                pass
        # Let queued items flush to the master before the process exits.
        for key in ("traj_infos_queue", "eval_traj_infos_queue", "error_queue"):
            q = c.get(key)
            if q is not None:
                q.close()
                q.join_thread()
