"""The generation loop of an evolution-strategies run: ask, evaluate on the workers, tell, log.

Each generation the strategy proposes a population, the evaluator plays
``episodes_per_candidate`` episodes of every candidate on the parallel workers, and the
strategy is told each candidate's mean return. Every candidate of a generation plays the
same episode seeds (common random numbers: candidates are ranked on equal starts, which
cuts the noise in the ranking); the seeds change from one generation to the next.

At every log interval the distribution's center (the solution a user deploys) plays
``eval_episodes`` fixed evaluation episodes, and one row goes to ``progress.csv`` with the
RL runners' columns, so that ``rlfast plot`` and sweep tables read ES runs as they read RL
runs: ``Diagnostics/*`` (``Iteration`` is the generation, ``CumSteps`` counts the
population's environment steps, plus ``EvaluationsPerSecond``: candidates evaluated per
second of generation time) and ``Return*``/``Length*`` of the center's evaluation episodes;
then ``PopulationReturn*`` (this generation's candidate fitnesses), ``BestReturn`` (the best
candidate fitness so far) and ``Sigma`` (the strategy's step size). The snapshot of that row
(atomic, per the logger's snapshot mode) holds the strategy's state, the center and the best
solution, with the policy's constructor arguments.
"""
from __future__ import annotations

import signal
import time
import numpy as np
import torch

from rlfast.es.base import BaseES
from rlfast.es.evaluator import EsEvaluator
from rlfast.utils.interrupts import SigtermGuard, signal_name
from rlfast.samplers.base import EVAL_ENV_SEED_OFFSET
from rlfast.samplers.parallel.worker import set_worker_affinity
from rlfast.utils.logging import logger

__all__ = ["EsRunner"]


class EsRunner:
    """Runs ``strategy`` for ``n_generations`` generations (fewer when ``n_steps``
    population steps are reached, the center's evaluation averages ``stop_return`` or more,
    or the strategy's own stop conditions hold); see the module docstring for what is
    logged. ``affinity`` (``master_cpus``) pins this process; the workers' cores are the
    evaluator's."""

    def __init__(self, strategy: BaseES, evaluator: EsEvaluator, n_generations: int,
                 n_steps: int | None = None, episodes_per_candidate: int = 1,
                 eval_episodes: int = 8, log_interval_generations: int = 1,
                 stop_return: float | None = None, seed: int = 0,
                 affinity: dict | None = None, snapshot_info: dict | None = None):
        for name, value in (("n_generations", n_generations),
                            ("episodes_per_candidate", episodes_per_candidate),
                            ("eval_episodes", eval_episodes),
                            ("log_interval_generations", log_interval_generations)):
            if int(value) < 1:
                raise ValueError(f"{name} must be >= 1; got {value}")
        if n_steps is not None and int(n_steps) < 1:
            raise ValueError(f"n_steps must be >= 1 or None; got {n_steps}")
        self.strategy = strategy
        self.evaluator = evaluator
        self.n_generations = int(n_generations)
        self.n_steps = None if n_steps is None else int(n_steps)
        self.episodes_per_candidate = int(episodes_per_candidate)
        self.eval_episodes = int(eval_episodes)
        self.log_interval = int(log_interval_generations)
        self.stop_return = None if stop_return is None else float(stop_return)
        self.seed = int(seed)
        self.affinity = dict(affinity or {})
        self.snapshot_info = dict(snapshot_info or {})
        self.popsize = int(strategy.popsize)
        self._reset_counters()

    # ---- the seeds of the episodes --------------------------------------------------------
    def generation_seeds(self, generation: int) -> np.ndarray:
        """The episode seeds every candidate of ``generation`` plays."""
        first = self.seed + 1 + generation * self.episodes_per_candidate
        return np.arange(first, first + self.episodes_per_candidate)

    def eval_seeds(self) -> np.ndarray:
        """The center's evaluation episodes: the same seeds at every log row."""
        first = self.seed + EVAL_ENV_SEED_OFFSET
        return np.arange(first, first + self.eval_episodes)

    # ---- one generation -------------------------------------------------------------------
    def run_generation(self, generation: int) -> tuple[np.ndarray, list]:
        """Ask, evaluate, tell; returns (the candidates' fitnesses, their trajectory infos)."""
        solutions = self.strategy.ask()
        self.evaluator.write(0, solutions)
        seeds = self.generation_seeds(generation)
        rows = np.repeat(np.arange(self.popsize), len(seeds))
        infos = self.evaluator.evaluate(rows, np.tile(seeds, self.popsize))
        returns = np.zeros(self.popsize)
        for info in infos:
            returns[info["Candidate"]] += info["Return"]
        fitness = returns / len(seeds)
        self.strategy.tell(solutions, fitness)
        return fitness, infos

    def evaluate_center(self) -> list:
        """Play the evaluation episodes of the strategy's center; returns their infos."""
        self.evaluator.write(self.popsize, np.asarray(self.strategy.result.center)[None])
        seeds = self.eval_seeds()
        return self.evaluator.evaluate([self.popsize] * len(seeds), seeds)

    # ---- the run --------------------------------------------------------------------------
    def train(self) -> dict:
        """Run the search; returns ``dict(final_return, best_return, eval_returns=[(steps,
        return)], cum_steps, n_itr, stop_reason)``. Ctrl-C or SIGTERM logs the interrupt,
        saves a snapshot of the last finished generation when it has none, stops the
        workers and re-raises (``KeyboardInterrupt`` / ``TrainingInterrupted``)."""
        previous_cpus = self._pin_master()
        with SigtermGuard() as guard:
            try:
                where = self.evaluator.workers_cpus or "none (this process plays)"
                logger.log(f"{self!r}: workers on cpus {where}")
                self.evaluator.initialize(self.popsize + 1)
                self._loop(guard)
                guard.defer()
            except KeyboardInterrupt as interrupt:
                guard.defer()
                signum = getattr(interrupt, "signum", signal.SIGINT)
                logger.log(f"ES interrupted by {signal_name(signum)} after "
                           f"{self.generations_done} generations; stopping.", console=True)
                if self.generations_done > self._snapshot_generation + 1:
                    self._save_snapshot(self.generations_done - 1)
                raise
            finally:
                self.evaluator.shutdown()
                self._restore_master(previous_cpus)
        logger.log(f"ES finished: {self.stop_reason}.", console=True)
        return dict(final_return=self.final_return, best_return=self.strategy.result.best_return,
                    eval_returns=list(self.eval_returns), cum_steps=self.cum_steps,
                    n_itr=self.generations_done, stop_reason=self.stop_reason)

    def _reset_counters(self) -> None:
        self._start_generation = 0
        self.generations_done = 0
        self.cum_steps = self.cum_evaluations = self.cum_trajs = 0
        self.cum_time = 0.0
        self.eval_returns: list[tuple[int, float]] = []
        self.final_return = float("nan")
        self.stop_reason = f"{self.n_generations} generations done"
        self._snapshot_generation = -1
        self._since_log = dict(time=0.0, steps=0, evaluations=0)

    def _loop(self, guard: SigtermGuard) -> None:
        for generation in range(self._start_generation, self.n_generations):
            start = time.perf_counter()
            fitness, infos = self.run_generation(generation)
            elapsed = time.perf_counter() - start
            steps = int(sum(info["Length"] for info in infos))
            self.cum_steps += steps
            self.cum_evaluations += self.popsize
            self.cum_trajs += len(infos)
            self.cum_time += elapsed
            for key, value in (("time", elapsed), ("steps", steps),
                               ("evaluations", self.popsize)):
                self._since_log[key] += value
            self.generations_done = generation + 1
            self.last_fitness = fitness
            last = generation == self.n_generations - 1
            stop = self._stop_condition()
            if stop or last or (generation + 1) % self.log_interval == 0:
                with guard.held():  # a log row and its snapshot are never separated
                    self._log_row(generation)
                    self._save_snapshot(generation)
                if stop is None:
                    stop = self._return_reached()
            if stop:
                self.stop_reason = stop
                return

    def _stop_condition(self) -> str | None:
        if self.n_steps is not None and self.cum_steps >= self.n_steps:
            return f"{self.cum_steps} population steps reached n_steps={self.n_steps}"
        conditions = self.strategy.stop()
        if conditions:
            return "the strategy's stop conditions hold: " + ", ".join(
                f"{k}={v}" for k, v in conditions.items())
        return None

    def _return_reached(self) -> str | None:
        if self.stop_return is not None and self.final_return >= self.stop_return:
            return (f"the center's evaluation return {self.final_return:.2f} reached "
                    f"stop_return={self.stop_return:g}")
        return None

    def _log_row(self, generation: int) -> None:
        eval_start = time.perf_counter()
        eval_infos = self.evaluate_center()
        eval_time = time.perf_counter() - eval_start
        returns = np.asarray([info["Return"] for info in eval_infos], dtype=np.float64)
        self.final_return = float(returns.mean())
        self.eval_returns.append((self.cum_steps, self.final_return))
        since = self._since_log
        result = self.strategy.result
        with logger.tabular_prefix("Diagnostics/"):
            logger.record_tabular("Iteration", generation)
            logger.record_tabular("CumSteps", self.cum_steps)
            logger.record_tabular("CumTime (s)", self.cum_time)
            logger.record_tabular("StepsPerSecond", since["steps"] / max(since["time"], 1e-9))
            logger.record_tabular("CumCompletedTrajs", self.cum_trajs)
            logger.record_tabular("EvaluationsPerSecond",
                                  since["evaluations"] / max(since["time"], 1e-9))
            logger.record_tabular("CumEvaluations", self.cum_evaluations)
            logger.record_tabular("EvalTime (s)", eval_time)
            logger.record_tabular("NumEvalTrajs", len(eval_infos))
            logger.record_tabular("TrainReturn", float(np.mean(self.last_fitness)))
        for key in ("Return", "Length", "DiscountedReturn", "NonzeroRewards"):
            values = [info[key] for info in eval_infos if key in info]
            if values:
                logger.record_tabular_misc_stat(key, np.asarray(values, dtype=np.float64))
        logger.record_tabular_misc_stat("PopulationReturn", np.asarray(self.last_fitness))
        logger.record_tabular("BestReturn", float(result.best_return))
        logger.record_tabular("Sigma", float(self.strategy.sigma))
        logger.dump_tabular(with_prefix=False)
        self._since_log = dict(time=0.0, steps=0, evaluations=0)

    def runner_state(self) -> dict:
        """The loop's counters, for the snapshot (NaN saved as None)."""
        final = None if self.final_return != self.final_return else float(self.final_return)
        return dict(cum_evaluations=self.cum_evaluations, cum_trajs=self.cum_trajs,
                    cum_time=self.cum_time, final_return=final,
                    eval_returns=[[int(s), float(r)] for s, r in self.eval_returns])

    def resume_from(self, snapshot: dict) -> None:
        """Continue after the snapshot's generation: the strategy's state (its random
        generator included) and the loop's counters come back, and the episode seeds follow
        the generation number, so a resumed run plays exactly the generations an
        uninterrupted one would have."""
        if type(self.strategy).__name__ != snapshot.get("strategy"):
            raise ValueError(f"the snapshot holds a {snapshot.get('strategy')} search; this "
                             f"run's strategy is {type(self.strategy).__name__}")
        self.strategy.load_state_dict(snapshot["strategy_state"])
        state = snapshot["runner_state"]
        self._start_generation = self.generations_done = int(snapshot["itr"]) + 1
        self._snapshot_generation = int(snapshot["itr"])
        self.cum_steps = int(snapshot["cum_steps"])
        self.cum_evaluations = int(state["cum_evaluations"])
        self.cum_trajs = int(state["cum_trajs"])
        self.cum_time = float(state["cum_time"])
        self.final_return = (float("nan") if state["final_return"] is None
                             else float(state["final_return"]))
        self.eval_returns = [(int(s), float(r)) for s, r in state["eval_returns"]]

    def work_left(self) -> bool:
        """Whether a generation remains within ``n_generations`` and ``n_steps``."""
        return self._start_generation < self.n_generations and (
            self.n_steps is None or self.cum_steps < self.n_steps)

    def _save_snapshot(self, generation: int) -> None:
        result = self.strategy.result
        logger.save_itr_params(generation, dict(
            itr=generation, cum_steps=self.cum_steps, es=True,
            strategy=type(self.strategy).__name__,
            strategy_state=self.strategy.state_dict(), runner_state=self.runner_state(),
            center=np.asarray(result.center, dtype=np.float64),
            best_solution=np.asarray(result.best_solution, dtype=np.float64),
            best_return=float(result.best_return), **self.snapshot_info))
        self._snapshot_generation = generation

    # ---- this process's cores -------------------------------------------------------------
    def _pin_master(self) -> tuple[list[int], int] | None:
        """Pin this process to ``master_cpus``; returns what to restore (cores, threads)."""
        cpus = self.affinity.get("master_cpus")
        if not cpus or not self.affinity.get("set_affinity", True):
            return None
        try:
            import psutil
            previous = psutil.Process().cpu_affinity()
        except (ImportError, AttributeError, OSError):
            return None
        threads = torch.get_num_threads()
        set_worker_affinity(cpus, self.affinity.get("master_torch_threads") or 1)
        return previous, threads

    @staticmethod
    def _restore_master(previous: tuple[list[int], int] | None) -> None:
        """Give a caller that runs the search in-process its cores and threads back."""
        if previous is None:
            return
        cpus, threads = previous
        torch.set_num_threads(threads)
        try:
            import psutil
            psutil.Process().cpu_affinity(cpus)
        except (ImportError, AttributeError, OSError, ValueError):
            pass

    def __repr__(self) -> str:
        return (f"EsRunner({type(self.strategy).__name__}, popsize={self.popsize}, "
                f"n_generations={self.n_generations}, workers={self.evaluator.n_workers})")

