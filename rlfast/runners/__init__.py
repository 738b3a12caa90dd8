"""Runners own the training loop and the hardware."""
from rlfast.runners.interrupts import TrainingInterrupted
from rlfast.runners.minibatch_rl import MinibatchRl, MinibatchRlBase, MinibatchRlEval

__all__ = ["MinibatchRlBase", "MinibatchRl", "MinibatchRlEval", "TrainingInterrupted"]
