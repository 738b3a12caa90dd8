"""ES fitness on worker processes over shared memory: same returns as a plain episode loop,
whatever the number of workers; failures and silence become errors; nothing is left behind."""
import functools
import os
import time

import gymnasium as gym
import numpy as np
import pytest

from rlfast.envs import make
from rlfast.es.evaluator import EsEvaluator, EsWorkerError, split_lanes
from rlfast.es.policy import EsPolicy, policy_spec
from rlfast.samplers import TrajInfo
from tests.es._reference import reference_return
from tests.integration._guards import live_children

CARTPOLE = functools.partial(make, id="CartPole-v1")


def _spec(env_id, hidden=()):
    env = gym.make(env_id)
    return dict(policy_spec(env.observation_space, env.action_space), hidden_sizes=list(hidden))


def test_split_lanes():
    assert split_lanes(7, 3) == [(0, 3), (3, 5), (5, 7)]
    assert split_lanes(1, 2) == [(0, 1), (1, 1)]


@pytest.mark.parametrize("env_id,hidden", [("CartPole-v1", ()), ("Pendulum-v1", (6,))])
def test_workers_match_in_process_and_reference(env_id, hidden):
    spec = _spec(env_id, hidden)
    n_params = EsPolicy(**spec).n_params
    vectors = np.random.default_rng(2).normal(scale=0.5, size=(5, n_params))
    rows, seeds = [0, 1, 2, 3, 4, 0, 4], [10, 11, 12, 13, 14, 15, 16]
    results = {}
    before = set(live_children())
    for workers in ([], [[0]], [[0], [0]], [[0], [0], [0]]):
        evaluator = EsEvaluator(functools.partial(make, id=env_id), spec, TrajInfo,
                                workers_cpus=workers)
        try:
            evaluator.initialize(6)
            evaluator.write(0, vectors)
            if workers:
                assert len(set(live_children()) - before) == len(workers)
            infos = evaluator.evaluate(rows, seeds)
        finally:
            evaluator.shutdown()
        assert [info["Candidate"] for info in infos] == rows
        results[len(workers)] = [info["Return"] for info in infos]
    assert set(live_children()) - before == set()
    for n in (1, 2, 3):
        assert results[n] == results[0]
    policy = EsPolicy(**spec)
    expected = [reference_return(env_id, policy.load_vector(vectors[r].astype(np.float32)), s)
                for r, s in zip(rows, seeds)]
    np.testing.assert_allclose(results[0], expected, rtol=1e-5)


def test_episode_cap_truncates():
    spec = _spec("CartPole-v1")
    evaluator = EsEvaluator(CARTPOLE, spec, TrajInfo, workers_cpus=[], max_episode_steps=7)
    evaluator.initialize(1)
    # Push left/right by the pole angle: balances for far more than 7 steps.
    evaluator.write(0, np.array([[0, 0, -1, -1, 0, 0, 1, 1, 0, 0]], dtype=np.float64))
    infos = evaluator.evaluate([0, 0], [1, 2])
    evaluator.shutdown()
    assert [(i["Length"], i["Truncated"]) for i in infos] == [(7, True), (7, True)]


class _FailingEnv:
    """Wraps CartPole; raises on the 5th step of the environment reset with seed 3."""

    def __init__(self):
        self.env = make(id="CartPole-v1")
        self.steps, self.seed_ = 0, None

    def seed(self, seed):
        self.seed_ = seed
        self.env.seed(seed)

    def reset(self):
        self.steps = 0
        return self.env.reset()

    def step(self, action):
        self.steps += 1
        if self.seed_ == 3 and self.steps == 5:
            raise RuntimeError("boom in the environment")
        return self.env.step(action)

    def close(self):
        self.env.close()


class _SlowEnv(_FailingEnv):
    def step(self, action):
        time.sleep(0.5)
        return self.env.step(action)


def test_worker_error_reaches_the_master_and_nothing_is_left():
    before = set(live_children())
    evaluator = EsEvaluator(_FailingEnv, _spec("CartPole-v1"), TrajInfo, workers_cpus=[[0], [0]])
    evaluator.initialize(2)
    with pytest.raises(EsWorkerError, match="(?s)ES worker 1.*boom in the environment"):
        evaluator.evaluate([0, 0, 1, 1], [1, 2, 3, 4])
    evaluator.shutdown()
    assert set(live_children()) - before == set()


def test_silent_worker_times_out_with_a_clear_error():
    before = set(live_children())
    evaluator = EsEvaluator(_SlowEnv, _spec("CartPole-v1"), TrajInfo, workers_cpus=[[0]],
                            timeout_s=1.0)
    evaluator.initialize(1)
    start = time.monotonic()
    with pytest.raises(EsWorkerError, match="evaluator.timeout_s"):
        evaluator.evaluate([0], [1])
    assert time.monotonic() - start < 20
    evaluator.shutdown()
    assert set(live_children()) - before == set()


def test_bad_input():
    spec = _spec("CartPole-v1")
    with pytest.raises(ValueError, match="max_episode_steps must be >= 1; got 0"):
        EsEvaluator(CARTPOLE, spec, TrajInfo, max_episode_steps=0)
    evaluator = EsEvaluator(CARTPOLE, spec, TrajInfo, workers_cpus=[])
    evaluator.initialize(2)
    with pytest.raises(ValueError, match=r"candidates must be \[n, 10\]; got \[1, 3\]"):
        evaluator.write(0, np.zeros((1, 3)))
    with pytest.raises(ValueError, match="outside the table of 2 rows"):
        evaluator.write(1, np.zeros((2, 10)))
    with pytest.raises(ValueError, match="2 rows but 1 seeds"):
        evaluator.evaluate([0, 1], [5])
    evaluator.shutdown()
    assert os.getpid()  # the master is intact


class _SteppedTrajInfo(TrajInfo):
    """A subclass: the evaluator steps it per step, as the samplers do (no fast path)."""


def test_fast_statistics_match_stepped_traj_infos():
    spec = _spec("Pendulum-v1", (4,))
    vectors = np.random.default_rng(5).normal(size=(3, EsPolicy(**spec).n_params))
    results = []
    for cls in (TrajInfo, _SteppedTrajInfo):
        evaluator = EsEvaluator(functools.partial(make, id="Pendulum-v1"), spec, cls,
                                workers_cpus=[], max_episode_steps=150)
        evaluator.initialize(3)
        evaluator.write(0, vectors)
        infos = evaluator.evaluate([0, 1, 2], [7, 8, 9])
        evaluator.shutdown()
        assert all(type(info) is cls for info in infos)
        results.append([{k: v for k, v in info.items() if not k.startswith("_")}
                        for info in infos])
    assert results[0] == results[1]
    assert results[0][0]["Length"] == 150 and results[0][0]["Truncated"]
