"""The algorithm interface: RLAlgorithm is abstract in initialize / optimize_agent, every
algorithm defines both, documented and typed; shared pieces are defined once. (Class depth is
checked for the whole package in tests/test_class_hierarchy.py.)"""
import abc
import inspect

import pytest

import rlfast.algos
from rlfast.algos import A2C, DDPG, DQN, PPO, R2D1, SAC, TD3, CategoricalDQN, RLAlgorithm

ALGORITHMS = [A2C, PPO, DQN, CategoricalDQN, R2D1, DDPG, TD3, SAC]


def test_rl_algorithm_is_abstract_in_initialize_and_optimize_agent():
    assert isinstance(RLAlgorithm, abc.ABCMeta)
    assert RLAlgorithm.__abstractmethods__ == {"initialize", "optimize_agent"}
    with pytest.raises(TypeError):
        RLAlgorithm()

    class NoUpdate(RLAlgorithm):
        def initialize(self, *args, **kwargs):
            pass

    with pytest.raises(TypeError, match="optimize_agent"):
        NoUpdate()


@pytest.mark.parametrize("cls", ALGORITHMS, ids=lambda c: c.__name__)
def test_every_algorithm_is_concrete(cls):
    assert not inspect.isabstract(cls)
    for name in ("initialize", "optimize_agent", "optim_state_dict", "load_optim_state_dict"):
        method = getattr(cls, name)
        assert method.__doc__, (cls.__name__, name)
        assert inspect.signature(method).return_annotation is not inspect.Signature.empty


def test_only_sac_keeps_its_own_optim_state_dict():
    """RLAlgorithm saves the optimizer; only SAC adds something (its temperature)."""
    owners = {cls.__name__ for cls in ALGORITHMS + [RLAlgorithm]
              if "optim_state_dict" in vars(cls)}
    assert owners == {"RLAlgorithm", "SAC"}


@pytest.mark.parametrize("cls", [A2C, PPO])
def test_pg_hyperparameters_live_in_the_base(cls):
    assert "__init__" in vars(rlfast.algos.PolicyGradientAlgo)
    algo = cls(discount=0.5, learning_rate=0.1, entropy_loss_coeff=0.2, clip_grad_norm=3.0,
               gae_lambda=0.9, optim_kwargs=dict(eps=1e-5))
    assert (algo.discount, algo.learning_rate, algo.entropy_loss_coeff, algo.clip_grad_norm,
            algo.gae_lambda, algo.optim_kwargs) == (0.5, 0.1, 0.2, 3.0, 0.9, dict(eps=1e-5))
