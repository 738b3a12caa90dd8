#!/usr/bin/env python
"""Benchmark: ES fitness evaluations per second on CartPole-v1, rlfast's workers against a
``concurrent.futures.ProcessPoolExecutor`` loop, with 1 and 2 workers (issue 18).

The two contenders do exactly the same work: the same population of linear policies (a good
CartPole policy plus Gaussian noise, so that most episodes run long, as late in a search),
one episode per candidate, the same episode seeds, deterministic actions; the script checks
that both return the same episode returns before it times anything.

- ``rlfast``: :class:`rlfast.es.evaluator.EsEvaluator`. The population goes into shared
  memory once per generation; each worker gets its lanes (row, seed: a few integers) and
  plays all its candidates at once, one environment each, with one batched forward pass per
  step for all of them.
- ``pool``: what lagom recommends and a user would write: a ``ProcessPoolExecutor`` whose
  workers build the environment and the torch policy once (pool initializer), and
  ``executor.map`` over the candidates, each task pickling its parameter vector (numpy) and
  the seed; a task loads the vector into the module (``vector_to_parameters``) and plays the
  episode with one forward pass per step.

Workers are started once per contender and worker count (outside the timing). Each round
times one generation of every contender in turn (interleaved, so the machine's noise hits
them alike); the table gives the median over rounds of evaluations (candidate episodes) per
second and the ratio rlfast / pool. Usage:
``python scripts/bench/bench_es.py [--popsize 64] [--rounds 7] [--workers 1,2] [--quick]``.
"""
from __future__ import annotations

import argparse
import concurrent.futures as futures
import functools
import multiprocessing as mp
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import REPO_ROOT, interleave, machine, markdown_table, median  # noqa: E402

sys.path.insert(0, REPO_ROOT)
from rlfast.envs import make  # noqa: E402
from rlfast.es.evaluator import EsEvaluator  # noqa: E402
from rlfast.es.policy import EsPolicy  # noqa: E402
from rlfast.samplers import TrajInfo  # noqa: E402

ENV_ID = "CartPole-v1"
SPEC = dict(obs_dim=4, n_outputs=2, discrete=True, low=None, high=None, hidden_sizes=[])
# Pushes toward the side the pole falls to: balances CartPole for its full 500 steps.
GOOD = np.array([0.0, 0.0, -1.0, -1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0])


def population(popsize: int, seed: int = 0, noise: float = 0.1) -> np.ndarray:
    """The candidates every contender evaluates: ``GOOD`` plus Gaussian noise."""
    rng = np.random.default_rng(seed)
    return (GOOD + noise * rng.normal(size=(popsize, GOOD.size))).astype(np.float32)


# ---- the pool contender: module-level, so the pool's workers find it --------------------
_POOL_STATE: dict = {}


def _pool_init() -> None:
    torch.set_num_threads(1)
    _POOL_STATE["env"] = make(id=ENV_ID)
    _POOL_STATE["policy"] = EsPolicy(**SPEC)


def _pool_episode(task: tuple[np.ndarray, int]) -> float:
    vector, seed = task
    env, policy = _POOL_STATE["env"], _POOL_STATE["policy"]
    policy.load_vector(vector)
    env.seed(int(seed))
    observation, total, done = env.reset(), 0.0, False
    while not done:
        observation, reward, done, _ = env.step(policy.act(observation))
        total += float(reward)
    return total


class PoolContender:
    def __init__(self, n_workers: int):
        self.executor = futures.ProcessPoolExecutor(
            n_workers, mp_context=mp.get_context("fork"), initializer=_pool_init)
        list(self.executor.map(_pool_episode, [(GOOD.astype(np.float32), 0)] * n_workers))

    def evaluate(self, vectors: np.ndarray, seeds: list[int]) -> list[float]:
        return list(self.executor.map(_pool_episode, zip(list(vectors), seeds)))

    def close(self) -> None:
        self.executor.shutdown(wait=True, cancel_futures=True)


class RlfastContender:
    def __init__(self, n_workers: int, popsize: int):
        cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else [0]
        self.evaluator = EsEvaluator(functools.partial(make, id=ENV_ID), SPEC, TrajInfo,
                                     workers_cpus=[[cpus[i % len(cpus)]] for i in range(n_workers)])
        self.evaluator.initialize(popsize)

    def evaluate(self, vectors: np.ndarray, seeds: list[int]) -> list[float]:
        self.evaluator.write(0, vectors)
        infos = self.evaluator.evaluate(range(len(vectors)), seeds)
        return [info["Return"] for info in infos]

    def close(self) -> None:
        self.evaluator.shutdown()


def run(popsize: int, rounds: int, worker_counts: list[int]) -> list[dict]:
    torch.set_num_threads(1)
    vectors = population(popsize)
    contenders = {}
    for n in worker_counts:
        contenders[("rlfast", n)] = RlfastContender(n, popsize)
        contenders[("pool", n)] = PoolContender(n)
    try:
        seeds = list(range(100, 100 + popsize))
        reference = None
        for key, contender in contenders.items():  # same work: the same returns
            returns = contender.evaluate(vectors, seeds)
            if reference is None:
                reference = returns
            elif returns != reference:
                raise SystemExit(f"{key} returned different episode returns; not comparable")
        steps = None
        times: dict = {key: [] for key in contenders}
        for r, order in interleave(contenders, rounds):
            seeds = list(range(1000 * (r + 1), 1000 * (r + 1) + popsize))
            for key in order:
                start = time.perf_counter()
                contenders[key].evaluate(vectors, seeds)
                times[key].append(time.perf_counter() - start)
        steps = sum(contenders[("pool", worker_counts[0])].evaluate(vectors, seeds))
    finally:
        for contender in contenders.values():
            contender.close()
    rows = []
    for n in worker_counts:
        rl, pool = median(times[("rlfast", n)]), median(times[("pool", n)])
        rows.append(dict(workers=n, rlfast=popsize / rl, pool=popsize / pool, ratio=pool / rl,
                         steps_per_gen=int(steps)))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--popsize", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--workers", default="1,2", help="worker counts, comma separated")
    parser.add_argument("--quick", action="store_true", help="tiny run (a test)")
    args = parser.parse_args(argv)
    popsize, rounds = (8, 2) if args.quick else (args.popsize, args.rounds)
    worker_counts = [int(w) for w in args.workers.split(",")]
    rows = run(popsize, rounds, worker_counts)
    print(f"Machine: {machine()}")
    print(f"{ENV_ID}, linear policies, population {popsize}, one episode per candidate, "
          f"{rows[0]['steps_per_gen']} env steps per generation; median of {rounds} "
          f"interleaved rounds")
    print(markdown_table(["workers", "rlfast evals/s", "ProcessPoolExecutor evals/s",
                          "rlfast / pool"],
                         [[row["workers"], f"{row['rlfast']:.1f}", f"{row['pool']:.1f}",
                           f"{row['ratio']:.2f}x"] for row in rows]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
