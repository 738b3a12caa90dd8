"""Runners own the training loop and the hardware."""
from rlfast.runners.async_rl import AsyncRl, AsyncRlBase, AsyncRlEval, AsyncRunError
from rlfast.runners.interrupts import TrainingInterrupted
from rlfast.runners.minibatch_rl import MinibatchRl, MinibatchRlBase, MinibatchRlEval

__all__ = ["AsyncRlBase", "AsyncRl", "AsyncRlEval", "AsyncRunError", "MinibatchRlBase", "MinibatchRl",
           "MinibatchRlEval", "TrainingInterrupted"]
