"""Algorithms: turn sample batches into agent updates."""
from rlfast.algos.base import RLAlgorithm
from rlfast.algos.pg.a2c import A2C
from rlfast.algos.pg.base import PolicyGradientAlgo
from rlfast.algos.pg.ppo import PPO
from rlfast.algos.dqn import DQN, R2D1, CategoricalDQN
from rlfast.algos.qpg import DDPG, SAC, TD3

__all__ = ["RLAlgorithm", "PolicyGradientAlgo", "A2C", "PPO", "DQN", "CategoricalDQN", "R2D1",
           "DDPG", "TD3", "SAC"]
