"""Observation and action spaces: integer and float boxes, composites of named sub-spaces, and
the wrapper that translates gymnasium spaces into them."""
from rlfast.spaces.base import Space
from rlfast.spaces.composite import Composite
from rlfast.spaces.float_box import FloatBox
from rlfast.spaces.gym_wrapper import GymSpaceWrapper
from rlfast.spaces.int_box import IntBox

__all__ = ["Space", "IntBox", "FloatBox", "Composite", "GymSpaceWrapper"]
