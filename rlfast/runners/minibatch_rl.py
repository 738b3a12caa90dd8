"""Single-process runners: alternate ``sampler.obtain_samples`` and ``algo.optimize_agent``."""
from __future__ import annotations

import math
import time
from collections import deque

import numpy as np
import psutil
import torch

from rlfast.utils.logging import logger
from rlfast.utils.prog_bar import ProgBarCounter
from rlfast.utils.seed import make_seed, set_seed


class MinibatchRlBase:
    """Startup, logging and snapshots shared by the minibatch runners.

    ``affinity`` (dict) may hold ``master_cpus``, ``master_torch_threads``, ``cuda_idx``,
    ``workers_cpus`` and ``set_affinity``; the sampler reads the worker entries.
    ``shutdown`` runs on every exit path, so no worker process outlives the run.
    """

    _eval = False

    def __init__(self, algo, agent, sampler, n_steps, seed: int | None = None,
                 affinity: dict | None = None, log_interval_steps: float = 1e5,
                 progress_bar: bool = True):
        n_steps, log_interval_steps = int(n_steps), int(log_interval_steps)
        if n_steps < 1 or log_interval_steps < 1:
            raise ValueError(f"n_steps and log_interval_steps must be >= 1; got {n_steps}, "
                             f"{log_interval_steps}")
        self.algo, self.agent, self.sampler = algo, agent, sampler
        self.n_steps = n_steps
        self.seed = seed
        self.affinity = dict(affinity or {})
        self.log_interval_steps = log_interval_steps
        self.progress_bar = progress_bar
        self.rank, self.world_size = 0, 1
        self.stop_requested = False
        self.itrs_done = 0

    # ---- startup / shutdown ------------------------------------------------------------------
    def startup(self) -> int:
        self._set_master_affinity()
        if self.seed is None:
            self.seed = make_seed()
        set_seed(self.seed)
        examples = self.sampler.initialize(
            agent=self.agent, affinity=self.affinity, seed=self.seed + 1,
            bootstrap_value=getattr(self.algo, "bootstrap_value", False),
            traj_info_kwargs=self.get_traj_info_kwargs(), rank=self.rank,
            world_size=self.world_size)
        self.itr_batch_size = self.sampler.batch_spec.size * self.world_size
        n_itr = self.get_n_itr()
        self.agent.to_device(self.affinity.get("cuda_idx"))
        if self.world_size > 1:
            self.agent.data_parallel()
        self.algo.initialize(agent=self.agent, n_itr=n_itr, batch_spec=self.sampler.batch_spec,
                             mid_batch_reset=self.sampler.mid_batch_reset, examples=examples,
                             world_size=self.world_size, rank=self.rank)
        self.initialize_logging()
        return n_itr

    def _set_master_affinity(self) -> None:
        cpus = self.affinity.get("master_cpus")
        if cpus and self.affinity.get("set_affinity", True):
            proc = psutil.Process()
            if hasattr(proc, "cpu_affinity"):
                try:
                    proc.cpu_affinity(list(cpus))
                except (OSError, ValueError):
                    pass
        # Small RL models run fastest on one thread; extra intra-op threads spin against the
        # sampler workers for the same cores. Affinity can ask for more.
        threads = self.affinity.get("master_torch_threads")
        if threads is None and self.affinity.get("cuda_idx") is None:
            threads = 1
        if threads:
            torch.set_num_threads(int(threads))

    def shutdown(self) -> None:
        logger.log("Training complete.")
        if self._pbar is not None:
            self._pbar.stop()
        self.sampler.shutdown()

    def get_traj_info_kwargs(self) -> dict:
        return dict(discount=getattr(self.algo, "discount", 1.0))

    def get_n_itr(self) -> int:
        """Iterations needed for ``n_steps``; logging happens every ``log_interval_itrs``."""
        self.log_interval_itrs = max(self.log_interval_steps // self.itr_batch_size, 1)
        self.n_itr = max(math.ceil(self.n_steps / self.itr_batch_size), 1)
        return self.n_itr

    # ---- snapshots ---------------------------------------------------------------------------
    def get_itr_snapshot(self, itr: int) -> dict:
        return dict(itr=itr, cum_steps=(itr + 1) * self.itr_batch_size,
                    agent_state_dict=self.agent.state_dict(),
                    optimizer_state_dict=self.algo.optim_state_dict())

    def save_itr_snapshot(self, itr: int) -> None:
        logger.log("saving snapshot...")
        logger.save_itr_params(itr, self.get_itr_snapshot(itr))

    # ---- diagnostics -------------------------------------------------------------------------
    def initialize_logging(self) -> None:
        self._opt_infos = {k: [] for k in self.algo.opt_info_fields}
        self._start_time = self._last_time = time.time()
        self._cum_time = 0.0
        self._cum_completed_trajs = 0
        self._last_update_counter = 0
        self.pbar = None
        self._pbar = None

    def store_diagnostics(self, itr: int, traj_infos: list, opt_info) -> None:
        self._cum_completed_trajs += len(traj_infos)
        for k, v in self._opt_infos.items():
            new = getattr(opt_info, k, [])
            v.extend(new if isinstance(new, list) else [new])
        if self._pbar is not None:
            self._pbar.update((itr + 1) % self.log_interval_itrs)

    def log_diagnostics(self, itr: int, traj_infos=None, eval_time: float = 0.0,
                        prefix: str = "Diagnostics/") -> None:
        if self._pbar is not None:
            self._pbar.stop()
        now = time.time()
        itr_time = now - self._last_time - eval_time
        self._cum_time += itr_time
        steps = (itr + 1) * self.itr_batch_size
        steps_since = self.log_interval_itrs * self.itr_batch_size if itr > 0 else self.itr_batch_size
        with logger.tabular_prefix(prefix):
            logger.record_tabular("Iteration", itr)
            logger.record_tabular("CumSteps", steps)
            logger.record_tabular("CumTime (s)", self._cum_time)
            logger.record_tabular("StepsPerSecond", steps_since / max(itr_time, 1e-9))
            logger.record_tabular("CumCompletedTrajs", self._cum_completed_trajs)
            logger.record_tabular("CumUpdates", getattr(self.algo, "update_counter", 0))
            logger.record_tabular("EvalTime (s)", eval_time)
        self._log_infos(traj_infos)
        logger.dump_tabular(with_prefix=False)
        self._last_time = time.time()
        if itr < self.n_itr - 1 and self.progress_bar:
            self._pbar = ProgBarCounter(self.log_interval_itrs)

    def _log_infos(self, traj_infos=None) -> None:
        traj_infos = list(self._traj_infos_for_log() if traj_infos is None else traj_infos)
        keys = ["Return", "Length", "NonzeroRewards", "DiscountedReturn"]
        if traj_infos:
            keys += [k for k in traj_infos[0] if not k.startswith("_") and k not in keys]
        for k in keys:
            values = [info[k] for info in traj_infos if k in info]
            logger.record_tabular_misc_stat(k, np.asarray(values, dtype=np.float64))
        for k, v in self._opt_infos.items():
            logger.record_tabular_misc_stat(k, np.asarray(v, dtype=np.float64))
            v.clear()

    def _traj_infos_for_log(self):
        return []

    def _start_progress(self) -> None:
        if self.progress_bar:
            self._pbar = ProgBarCounter(self.log_interval_itrs)

    def _run_loop(self, n_itr: int) -> None:
        for itr in range(n_itr):
            with logger.prefix(f"itr #{itr} "):
                self.agent.sample_mode(itr)
                samples, traj_infos = self.sampler.obtain_samples(itr)
                self.agent.train_mode(itr)
                opt_info = self.algo.optimize_agent(itr, samples)
                self.store_diagnostics(itr, traj_infos, opt_info)
                self.itrs_done = itr + 1
                if (itr + 1) % self.log_interval_itrs == 0 or itr == n_itr - 1:
                    self.log_and_snapshot(itr)
                    if self.stop_requested:
                        break

    def train(self):
        """Run startup, the training loop and shutdown (which also runs on error / Ctrl-C)."""
        self._pbar = None
        try:
            n_itr = self.startup()
            self.before_loop()
            self._start_progress()
            self._run_loop(n_itr)
        finally:
            self.shutdown()
        return self.final_result()


class MinibatchRl(MinibatchRlBase):
    """Tracks performance online: statistics of the last ``log_traj_window`` training
    trajectories are logged at each interval."""

    def __init__(self, log_traj_window: int = 100, **kwargs):
        super().__init__(**kwargs)
        self.log_traj_window = int(log_traj_window)

    def initialize_logging(self) -> None:
        super().initialize_logging()
        self._traj_window = deque(maxlen=self.log_traj_window)
        self._new_completed = 0
        self.last_return = float("nan")

    def store_diagnostics(self, itr, traj_infos, opt_info) -> None:
        self._traj_window.extend(traj_infos)
        self._new_completed += len(traj_infos)
        super().store_diagnostics(itr, traj_infos, opt_info)

    def _traj_infos_for_log(self):
        return self._traj_window

    def before_loop(self) -> None:
        pass

    def log_and_snapshot(self, itr: int) -> None:
        self.save_itr_snapshot(itr)
        logger.record_tabular("Diagnostics/NewCompletedTrajs", self._new_completed)
        self._new_completed = 0
        if self._traj_window:
            self.last_return = float(np.mean([t["Return"] for t in self._traj_window]))
        self.log_diagnostics(itr)

    def final_result(self) -> dict:
        return dict(final_return=self.last_return, n_itr=self.n_itr,
                    cum_steps=self.n_itr * self.itr_batch_size)


class MinibatchRlEval(MinibatchRlBase):
    """Tracks performance offline: at itr 0 and every log interval the agent runs in eval mode
    on separate environments, and those trajectories make the ``Return*`` columns.

    ``stop_return``: end training at the first evaluation (after training started) whose
    average return reaches it, e.g. for "reach score X within N steps" checks and sweeps.
    """

    _eval = True

    def __init__(self, *args, stop_return: float | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.stop_return = None if stop_return is None else float(stop_return)

    def initialize_logging(self) -> None:
        super().initialize_logging()
        self.last_eval_return = float("nan")
        self.eval_returns: list[tuple[int, float]] = []

    def evaluate_agent(self, itr: int):
        if itr > 0 and self._pbar is not None:
            self._pbar.stop()
        logger.log("Evaluating agent...")
        self.agent.eval_mode(itr)
        start = time.time()
        traj_infos = self.sampler.evaluate_agent(itr)
        eval_time = time.time() - start
        logger.log(f"Evaluation: {len(traj_infos)} trajectories in {eval_time:.2f} s")
        self.last_eval_return = (float(np.mean([t["Return"] for t in traj_infos])) if traj_infos
                                 else float("nan"))  # no completed episode: no score
        steps = (itr + 1) * self.itr_batch_size if itr > 0 else 0
        self.eval_returns.append((steps, self.last_eval_return))
        return traj_infos, eval_time

    def before_loop(self) -> None:
        traj_infos, eval_time = self.evaluate_agent(0)
        self._log_eval_row(0, traj_infos, eval_time, steps_override=0)

    def _log_eval_row(self, itr, traj_infos, eval_time, steps_override=None) -> None:
        logger.record_tabular("Diagnostics/NumEvalTrajs", len(traj_infos))
        if steps_override is not None:
            # The pre-training evaluation: no steps or time have elapsed yet.
            logger.record_tabular("Diagnostics/Iteration", -1)
            logger.record_tabular("Diagnostics/CumSteps", 0)
            logger.record_tabular("Diagnostics/CumTime (s)", 0.0)
            logger.record_tabular("Diagnostics/StepsPerSecond", float("nan"))
            logger.record_tabular("Diagnostics/CumCompletedTrajs", 0)
            logger.record_tabular("Diagnostics/CumUpdates", 0)
            logger.record_tabular("Diagnostics/EvalTime (s)", eval_time)
            self._log_infos(traj_infos)
            logger.dump_tabular(with_prefix=False)
            self._last_time = time.time()
        else:
            self.log_diagnostics(itr, traj_infos, eval_time)

    def log_and_snapshot(self, itr: int) -> None:
        traj_infos, eval_time = self.evaluate_agent(itr)
        self.save_itr_snapshot(itr)
        self._log_eval_row(itr, traj_infos, eval_time)
        if self.stop_return is not None and self.last_eval_return >= self.stop_return:
            logger.log(f"Evaluation return {self.last_eval_return:.2f} reached stop_return "
                       f"{self.stop_return}: stopping after {(itr + 1) * self.itr_batch_size} steps")
            self.stop_requested = True

    def final_result(self) -> dict:
        return dict(final_return=self.last_eval_return, eval_returns=list(self.eval_returns),
                    n_itr=self.n_itr, cum_steps=self.itrs_done * self.itr_batch_size)
