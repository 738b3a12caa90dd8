"""``RunningMeanStdModel`` lives in ``rlfast.utils.running_mean_std`` (the policy-gradient
algorithms' reward normalization uses it too, and algorithms sit beside, not above, the
models); this module keeps the models' import path."""
from rlfast.utils.running_mean_std import RunningMeanStdModel

__all__ = ["RunningMeanStdModel"]
