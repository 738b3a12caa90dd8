"""A PettingZoo env whose agents have different spaces (``pz:tests.envs._pz_mixed``)."""
from tests.envs._pz_toy import MixedEnv


def parallel_env(**kwargs):
    return MixedEnv(**kwargs)
