"""Evolution strategies built by hand: CMA-ES on the weights of a linear CartPole policy,
candidates played on parallel worker processes over shared memory.

The same search as ``rlfast train cmaes CartPole-v1``, written out: an ``EsPolicy`` fixes
the layout of a candidate (10 numbers: a 4x2 weight matrix and 2 biases), the ``EsEvaluator``
starts one worker per core, and the loop is plain ``ask`` / ``tell``. ``EsRunner`` (used by
the command line) adds logging, snapshots and the stop rules around the same calls.

Run: python examples/example_5_es_cartpole.py
"""
import functools

import gymnasium as gym
import numpy as np

from rlfast.envs import make
from rlfast.es import CMAES
from rlfast.es.evaluator import EsEvaluator
from rlfast.es.policy import EsPolicy, policy_spec
from rlfast.samplers import TrajInfo


def search(seed: int = 0, generations: int = 30, popsize: int = 16) -> float:
    spaces = gym.make("CartPole-v1")
    spec = dict(policy_spec(spaces.observation_space, spaces.action_space), hidden_sizes=[])
    strategy = CMAES(EsPolicy(**spec).initial_vector("zeros"), sigma0=0.5, popsize=popsize,
                     seed=seed)
    evaluator = EsEvaluator(functools.partial(make, id="CartPole-v1"), spec, TrajInfo,
                            workers_cpus=[[0], [1]])  # two workers (pinned to cores 0 and 1)
    evaluator.initialize(popsize)
    try:
        for generation in range(generations):
            solutions = strategy.ask()
            evaluator.write(0, solutions)  # into the shared table, once per generation
            # One episode per candidate; all candidates play the same seed this generation.
            infos = evaluator.evaluate(range(popsize), [seed * 1000 + generation] * popsize)
            returns = np.array([info["Return"] for info in infos])
            strategy.tell(solutions, returns)
            print(f"generation {generation}: mean {returns.mean():.1f}, best so far "
                  f"{strategy.result.best_return:.1f}, sigma {strategy.sigma:.3f}")
            if strategy.stop():
                break
    finally:
        evaluator.shutdown()
    policy = EsPolicy(**spec).load_vector(strategy.result.center)
    env = gym.make("CartPole-v1")
    obs, _ = env.reset(seed=12345)
    total, done = 0.0, False
    while not done:
        obs, reward, terminated, truncated, _ = env.step(policy.act(obs))
        total += reward
        done = terminated or truncated
    print(f"the center plays an unseen episode: return {total:.0f}")
    return total


if __name__ == "__main__":
    search()
