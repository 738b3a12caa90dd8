"""Neural-network building blocks and complete agent models (plain torch modules)."""
from rlfast.models.conv2d import Conv2dHeadModel, Conv2dModel
from rlfast.models.mlp import MlpModel

__all__ = ["MlpModel", "Conv2dModel", "Conv2dHeadModel"]
