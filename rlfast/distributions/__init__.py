"""Action distributions: formulas applied to model outputs (``dist_info``).

``DistInfo`` here is the categorical one (``prob``), which ``MultiCategorical`` shares (its
``prob`` concatenates one probability vector per action dimension); the Gaussian's mean-only
variant is ``rlfast.distributions.gaussian.DistInfo``.
"""
from rlfast.distributions.base import Distribution
from rlfast.distributions.categorical import Categorical, DistInfo
from rlfast.distributions.discrete import DiscreteMixin
from rlfast.distributions.epsilon_greedy import CategoricalEpsilonGreedy, EpsilonGreedy
from rlfast.distributions.gaussian import DistInfoStd, Gaussian
from rlfast.distributions.multi_categorical import MultiCategorical

__all__ = ["Distribution", "DiscreteMixin", "Categorical", "MultiCategorical", "Gaussian",
           "DistInfo", "DistInfoStd", "EpsilonGreedy", "CategoricalEpsilonGreedy"]
