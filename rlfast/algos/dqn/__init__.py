"""Value-based algorithms: DQN (double, dueling via the model, n-step, prioritized) and C51."""
from rlfast.algos.dqn.cat_dqn import CategoricalDQN
from rlfast.algos.dqn.dqn import DQN

__all__ = ["DQN", "CategoricalDQN"]
