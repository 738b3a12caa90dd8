"""Q-value policy gradient algorithms for continuous actions: DDPG, TD3 and SAC."""
from rlfast.algos.qpg.base import QpgAlgoBase
from rlfast.algos.qpg.ddpg import DDPG, TD3
from rlfast.algos.qpg.sac import SAC

__all__ = ["QpgAlgoBase", "DDPG", "TD3", "SAC"]
