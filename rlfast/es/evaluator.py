"""Fitness evaluation of ES candidates on parallel worker processes over shared memory.

The master writes a population into one shared ``[rows, n_params]`` float32 table (built
before the workers fork, so every worker maps the same memory) and sends each worker only
its *lanes*: which table row to play and the environment seed of the episode, a few small
integers per lane. A worker plays all its lanes at once, one environment each, acting for
every lane with one batched forward pass per step (:class:`rlfast.es.policy.BatchedPolicy`),
and replies with one trajectory info per episode (``TrajInfo`` with ``Candidate`` set to
the row), the same records the RL samplers return. Parameters never travel through a pipe.

The workers are started, watched and stopped by the process supervisor
(``rlfast.utils.processes``): a worker that raises or dies makes :meth:`evaluate` raise
:class:`EsWorkerError` with its traceback, a worker silent past ``timeout_s`` raises too,
and every worker is stopped on every exit path. Each worker is pinned to its entry of
``workers_cpus`` (from an affinity code). ``workers_cpus=[]`` evaluates in the calling
process with the same code (no worker processes), for debugging and reference runs.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np
import torch

from rlfast.es.policy import BatchedPolicy, EsPolicy
from rlfast.samplers.base import WORKER_SEED_STRIDE
from rlfast.samplers.collections import TrajInfo
from rlfast.samplers.parallel.worker import set_worker_affinity
from rlfast.utils.processes import Deadline, ProcessSupervisor, StopChild, receive_command
from rlfast.utils.seed import set_seed

__all__ = ["EsEvaluator", "EsWorkerError", "play_lanes", "split_lanes"]


class EsWorkerError(RuntimeError):
    """An ES worker process raised (the message carries its traceback), died, or stayed
    silent past the evaluator's ``timeout_s``."""


def split_lanes(n_lanes: int, n_workers: int) -> list[tuple[int, int]]:
    """Contiguous ``(start, stop)`` shares of ``n_lanes`` lanes over ``n_workers`` workers,
    as even as possible (earlier workers take the extra ones)."""
    base, extra = divmod(n_lanes, n_workers)
    bounds, start = [], 0
    for i in range(n_workers):
        stop = start + base + (1 if i < extra else 0)
        bounds.append((start, stop))
        start = stop
    return bounds


class _Lanes:
    """A worker's environments and per-lane scratch arrays, grown on demand and reused by
    every later command (no allocation per step)."""

    def __init__(self, make_env: Callable[[], Any], obs_dim: int):
        self.make_env = make_env
        self.obs_dim = obs_dim
        self.envs: list = []
        self.observations = np.zeros((0, obs_dim), dtype=np.float32)

    def ensure(self, n: int) -> None:
        while len(self.envs) < n:
            self.envs.append(self.make_env())
        if self.observations.shape[0] < n:
            self.observations = np.zeros((n, self.obs_dim), dtype=np.float32)

    def close(self) -> None:
        for env in self.envs:
            try:
                env.close()
            except Exception:  # noqa: BLE001 - closing must not mask the real error
                pass
        self.envs = []


def play_lanes(lanes: _Lanes, batched: BatchedPolicy, params: torch.Tensor,
               rows: Sequence[int], seeds: Sequence[int], TrajInfoCls: Callable,
               max_episode_steps: int) -> list:
    """Play one episode per lane: lane ``i`` plays table row ``rows[i]`` in environment
    ``i``, reset with seed ``seeds[i]``. Returns the finished trajectory infos in lane order,
    each with ``Candidate`` (the row) and ``Truncated`` (cut at ``max_episode_steps``).

    With the plain :class:`TrajInfo` (undiscounted), the per-step statistics are summed in
    arrays and written into each lane's info when its episode ends (a quarter of a CartPole
    lane's time went to ``TrajInfo.step`` otherwise); any other class is stepped as the
    samplers step it."""
    n = len(rows)
    if n == 0:
        return []
    lanes.ensure(n)
    batched.load(params[torch.as_tensor(np.asarray(rows, dtype=np.int64))])
    observations = lanes.observations[:n]
    fast = TrajInfoCls is TrajInfo
    returns = np.zeros(n)
    nonzero = np.zeros(n, dtype=np.int64)
    infos: list = [None] * n
    for i in range(n):
        env = lanes.envs[i]
        env.seed(int(seeds[i]))
        observations[i] = np.asarray(env.reset(), dtype=np.float32).reshape(-1)
        infos[i] = TrajInfoCls()
    obs_torch = torch.from_numpy(observations)
    alive = list(range(n))
    steps = 0
    while alive:
        actions = batched.actions(obs_torch)  # every lane's action in one pass
        steps += 1
        still = []
        for i in alive:
            action = actions[i]
            observation, reward, done, env_info = lanes.envs[i].step(action)
            if fast:
                reward = float(reward)
                returns[i] += reward
                nonzero[i] += reward != 0
            else:
                infos[i].step(observation, action, reward, done, None, env_info)
            if done or steps >= max_episode_steps:
                info = infos[i]
                if fast:
                    info.Return = info.DiscountedReturn = float(returns[i])
                    info.Length, info.NonzeroRewards = int(steps), int(nonzero[i])
                info = info.terminate(observation)
                info["Candidate"] = int(rows[i])
                info["Truncated"] = bool(not done)
                infos[i] = info
            else:
                observations[i] = np.asarray(observation, dtype=np.float32).reshape(-1)
                still.append(i)
        alive = still
    return infos


def es_worker_process(conn, make_env: Callable[[], Any], policy_kwargs: dict,
                      params: torch.Tensor, TrajInfoCls: Callable, max_episode_steps: int,
                      cpus: Sequence[int] | None, seed: int) -> None:
    """Body of every ES worker (run by the process supervisor): serve
    ``("evaluate", rows, seeds)`` commands until ``("quit",)``; each reply is
    ``("done", trajectory infos)``."""
    set_worker_affinity(cpus, 1)
    set_seed(seed)
    policy = EsPolicy(**policy_kwargs)
    lanes = _Lanes(make_env, policy_kwargs["obs_dim"])
    batched = BatchedPolicy(policy)
    try:
        conn.send(("ready", None))
        while True:
            message = receive_command(conn)
            if message is None:
                break  # quit, or the master is gone
            _, rows, seeds = message
            conn.send(("done", play_lanes(lanes, batched, params, rows, seeds, TrajInfoCls,
                                          max_episode_steps)))
    except StopChild:
        raise
    finally:
        lanes.close()


class EsEvaluator:
    """Plays ES candidates on the workers of ``workers_cpus`` (one process per entry, each
    pinned to its cpus; ``[]``: in this process).

    ``make_env`` builds one rlfast environment (picklable for spawn; inherited with fork).
    ``max_episode_steps`` cuts an episode that never ends (the cut shows as ``Truncated``).
    ``timeout_s``: how long one :meth:`evaluate` may wait for a silent worker before it
    raises (None: only a dead or failing worker ends the wait).
    """

    def __init__(self, make_env: Callable[[], Any], policy_kwargs: dict, TrajInfoCls: Callable,
                 workers_cpus: Sequence[Sequence[int]] | None = None,
                 max_episode_steps: int = 10_000, timeout_s: float | None = 600.0,
                 seed: int = 0):
        if max_episode_steps < 1:
            raise ValueError(f"max_episode_steps must be >= 1; got {max_episode_steps}")
        self.make_env = make_env
        self.policy_kwargs = dict(policy_kwargs)
        self.TrajInfoCls = TrajInfoCls
        self.workers_cpus = [list(c) if isinstance(c, (list, tuple)) else [int(c)]
                             for c in (workers_cpus if workers_cpus is not None else [])]
        self.max_episode_steps = int(max_episode_steps)
        self.timeout_s = timeout_s
        self.seed = int(seed)
        self.params: torch.Tensor | None = None
        self._supervisor: ProcessSupervisor | None = None
        self._local: tuple | None = None

    @property
    def n_workers(self) -> int:
        return len(self.workers_cpus)

    def initialize(self, n_rows: int) -> None:
        """Allocate the shared table of ``n_rows`` candidates and start the workers (they
        report ready once built; a failure there raises :class:`EsWorkerError`)."""
        n_params = EsPolicy(**self.policy_kwargs).n_params
        self.params = torch.zeros(int(n_rows), n_params, dtype=torch.float32).share_memory_()
        common = dict(make_env=self.make_env, policy_kwargs=self.policy_kwargs,
                      params=self.params, TrajInfoCls=self.TrajInfoCls,
                      max_episode_steps=self.max_episode_steps)
        if not self.workers_cpus:
            policy = EsPolicy(**self.policy_kwargs)
            self._local = (_Lanes(self.make_env, self.policy_kwargs["obs_dim"]),
                           BatchedPolicy(policy))
            return
        self._supervisor = ProcessSupervisor(label="ES worker", error_cls=EsWorkerError)
        kwargs_list = [dict(common, cpus=cpus, seed=self.seed + WORKER_SEED_STRIDE * (i + 1))
                       for i, cpus in enumerate(self.workers_cpus)]
        self._supervisor.start(es_worker_process, kwargs_list, name="rlfast-es", owner=self)
        self._supervisor.gather("ready", self._deadline())

    def _deadline(self) -> Deadline:
        return Deadline(self.timeout_s, reason="raise evaluator.timeout_s (--set "
                                               "evaluator.timeout_s=SECONDS) for slower episodes")

    def write(self, start_row: int, vectors: np.ndarray) -> None:
        """Put candidate vectors into table rows ``start_row, start_row + 1, ...``."""
        vectors = np.asarray(vectors, dtype=np.float32)
        if vectors.ndim != 2 or vectors.shape[1] != self.params.shape[1]:
            raise ValueError(f"candidates must be [n, {self.params.shape[1]}]; got "
                             f"{list(vectors.shape)}")
        if start_row < 0 or start_row + len(vectors) > self.params.shape[0]:
            raise ValueError(f"rows {start_row}..{start_row + len(vectors) - 1} are outside "
                             f"the table of {self.params.shape[0]} rows")
        self.params[start_row:start_row + len(vectors)] = torch.from_numpy(vectors)

    def evaluate(self, rows: Sequence[int], seeds: Sequence[int]) -> list:
        """Play one episode per lane (table row ``rows[i]``, environment seed ``seeds[i]``),
        spread over the workers; returns the trajectory infos in lane order."""
        if len(rows) != len(seeds):
            raise ValueError(f"{len(rows)} rows but {len(seeds)} seeds")
        rows, seeds = [int(r) for r in rows], [int(s) for s in seeds]
        if self._supervisor is None:
            if self._local is None:
                raise RuntimeError("EsEvaluator.initialize() was not called")
            lanes, batched = self._local
            return play_lanes(lanes, batched, self.params, rows, seeds, self.TrajInfoCls,
                              self.max_episode_steps)
        shares = split_lanes(len(rows), self.n_workers)
        for i, (a, b) in enumerate(shares):  # a worker with no lanes replies at once
            self._supervisor.send_all(("evaluate", rows[a:b], seeds[a:b]), indexes=[i])
        replies = self._supervisor.gather("done", self._deadline())
        return [info for reply in replies for info in reply]

    def shutdown(self) -> None:
        """Stop and join the workers (idempotent), and close in-process environments."""
        if self._supervisor is not None:
            self._supervisor.stop()
        if self._local is not None:
            self._local[0].close()
            self._local = None
