"""Runners own the training loop and the hardware."""
from rlfast.runners.minibatch_rl import MinibatchRl, MinibatchRlBase, MinibatchRlEval

__all__ = ["MinibatchRlBase", "MinibatchRl", "MinibatchRlEval"]
