"""Value-based algorithms: DQN (double, dueling via the model, n-step, prioritized) and C51."""
from rlfast.algos.dqn.cat_dqn import CategoricalDQN
from rlfast.algos.dqn.dqn import DQN
from rlfast.algos.dqn.r2d1 import R2D1

__all__ = ["DQN", "CategoricalDQN", "R2D1"]
