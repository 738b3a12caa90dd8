"""Action distributions: formulas applied to model outputs (``dist_info``).

``DistInfo`` here is the categorical one (``prob``); the Gaussian's mean-only
variant is ``rlfast.distributions.gaussian.DistInfo``.
"""
from rlfast.distributions.base import Distribution
from rlfast.distributions.categorical import Categorical, DistInfo
from rlfast.distributions.discrete import DiscreteMixin
from rlfast.distributions.epsilon_greedy import CategoricalEpsilonGreedy, EpsilonGreedy
from rlfast.distributions.gaussian import DistInfoStd, Gaussian

__all__ = ["Distribution", "DiscreteMixin", "Categorical", "Gaussian", "DistInfo", "DistInfoStd",
           "EpsilonGreedy", "CategoricalEpsilonGreedy"]
