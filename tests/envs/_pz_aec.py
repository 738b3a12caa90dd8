"""A PettingZoo environment offered through the AEC API only (``pz:tests.envs._pz_aec``):
the leaving toy env of ``_pz_toy`` turned into an AEC env by PettingZoo's parallel_to_aec."""
from pettingzoo.utils.conversions import parallel_to_aec

from tests.envs._pz_toy import LeavingEnv


def env(**kwargs):
    return parallel_to_aec(LeavingEnv(**kwargs))
