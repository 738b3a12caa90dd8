"""Runners own the training loop and the hardware."""
from rlfast.runners.async_rl import AsyncRl, AsyncRlBase, AsyncRlEval, AsyncRunError
from rlfast.utils.interrupts import TrainingInterrupted
from rlfast.runners.minibatch_rl import MinibatchRl, MinibatchRlBase, MinibatchRlEval
from rlfast.runners.sync_rl import RankFailedError, SyncRl, SyncRlEval

__all__ = ["AsyncRlBase", "AsyncRl", "AsyncRlEval", "AsyncRunError", "MinibatchRlBase",
           "MinibatchRl", "MinibatchRlEval", "RankFailedError", "SyncRl", "SyncRlEval",
           "TrainingInterrupted"]
