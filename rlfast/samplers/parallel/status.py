"""What each sampler worker is doing, published through shared memory for the master to read.

Every worker owns one row of a small shared table of int64: ``[phase, iteration, step, env]``.
The collectors write it as they go -- a few integer stores per step, no allocation, no lock --
and the master reads it only to explain a worker that stayed silent past its timeout
("Sampler worker 1 ... was stepping environment 0 (env rank 1) at step 2 of 4 of the batch of
iteration 5"). A stopped or deadlocked process's last row stays readable, which is exactly
what that message needs. The serial sampler has no table: its collectors get ``status=None``.
"""
from __future__ import annotations

import ctypes
from enum import IntEnum

# Fields of a worker's row.
PHASE, ITR, STEP, ENV = range(4)
N_FIELDS = 4


class Phase(IntEnum):
    """What a worker is doing; 0 (the table's initial value) is "starting"."""

    STARTING = 0
    BUILDING_ENVS = 1
    BUILDING_EVAL_ENVS = 2
    RESETTING_ENVS = 3          # the first resets, before decorrelation
    DECORRELATING = 4
    STARTING_AGENT = 5
    WAITING_COMMAND = 6
    RESETTING_AFTER_BATCH = 7   # wait-reset collectors, after a batch
    RESETTING_BEFORE_BATCH = 8  # wait-reset collectors of the GPU samplers (deferred resets)
    COMPUTING_ACTIONS = 9       # the worker's own agent copy (CPU sampler)
    WAITING_FOR_ACTIONS = 10    # the master's action server (GPU samplers)
    STEPPING = 11
    RESETTING = 12              # mid-batch reset of a finished environment
    FINISHING_BATCH = 13
    REPLYING = 14
    EVAL_RESETTING = 15
    EVAL_COMPUTING_ACTIONS = 16
    EVAL_WAITING_FOR_ACTIONS = 17
    EVAL_STEPPING = 18
    EVAL_FINISHING = 19


class WorkerStatus:
    """One worker's row of the shared table; writable in place (``row[STEP] = t``).

    ``row`` is a ctypes int64 array over the shared memory: one store costs about as much as
    a list store, so the collectors write it directly in their loops.
    """

    __slots__ = ("row",)

    def __init__(self, row):
        self.row = row

    def set(self, phase: int, itr: int | None = None, step: int = -1, env: int = -1) -> None:
        """Publish a new phase (``itr`` None keeps the current iteration)."""
        row = self.row
        if itr is not None:
            row[ITR] = itr
        row[STEP] = step
        row[ENV] = env
        row[PHASE] = phase


class StatusTable:
    """The shared table of every worker's status, created by the sampler before the workers.

    ``env_ranks[i]`` are worker ``i``'s training environment ranks, ``eval_starts[i]`` the
    global index of its first evaluation environment; ``batch_T`` and ``eval_max_T`` size the
    step counts in the descriptions.
    """

    def __init__(self, ctx, env_ranks: list[list[int]], eval_starts: list[int], batch_T: int,
                 eval_max_T: int = 0):
        self.n_workers = len(env_ranks)
        self.raw = ctx.RawArray("q", self.n_workers * N_FIELDS)
        self.env_ranks = [list(r) for r in env_ranks]
        self.eval_starts = list(eval_starts)
        self.batch_T = int(batch_T)
        self.eval_max_T = int(eval_max_T)

    def worker(self, i: int) -> WorkerStatus:
        """Worker ``i``'s writable row (called in the worker)."""
        if not 0 <= i < self.n_workers:
            raise IndexError(f"worker {i} out of range 0..{self.n_workers - 1}")
        row = (ctypes.c_int64 * N_FIELDS).from_buffer(self.raw, i * N_FIELDS * 8)
        return WorkerStatus(row)

    def read(self, i: int) -> tuple[int, int, int, int]:
        """Worker ``i``'s ``(phase, iteration, step, env)`` as last written."""
        base = i * N_FIELDS
        return tuple(int(v) for v in self.raw[base:base + N_FIELDS])

    def describe(self, i: int) -> str:
        """What worker ``i`` was doing when it last wrote its row, in words."""
        phase, itr, step, env = self.read(i)
        template = _DESCRIPTIONS.get(phase)
        if template is None:
            return f"in an unknown phase ({phase})"
        ranks = self.env_ranks[i]
        if 0 <= env < len(ranks):
            env_text = f"environment {env} (env rank {ranks[env]})"
        else:
            env_text = f"environment {env}"
        if step < 0:
            in_eval = f"evaluating (iteration {itr}), before the first step"
        else:
            in_eval = f"evaluating (iteration {itr}), step {step + 1} of at most {self.eval_max_T}"
        return template.format(
            itr=itr, step=step + 1, env=env_text,
            eval_env=f"eval environment {env} (eval env {self.eval_starts[i] + env})",
            in_batch=f"at step {step + 1} of {self.batch_T} of the batch of iteration {itr}",
            in_eval=in_eval,
            after="before its first batch" if itr < 0 else f"after the batch of iteration {itr}",
            last_command=("before its first command" if itr < 0
                          else f"its last command was for iteration {itr}"),
            reply="'ready'" if itr < 0 else f"'done' for iteration {itr}")


_DESCRIPTIONS = {
    Phase.STARTING: "starting (it had not begun building its environments)",
    Phase.BUILDING_ENVS: "building its environments",
    Phase.BUILDING_EVAL_ENVS: "building its evaluation environments",
    Phase.RESETTING_ENVS: "resetting {env} before its first batch",
    Phase.DECORRELATING: "taking random decorrelation step {step} in {env}",
    Phase.STARTING_AGENT: "setting up its agent",
    Phase.WAITING_COMMAND: "waiting for a command ({last_command})",
    Phase.RESETTING_AFTER_BATCH: "resetting {env} {after}",
    Phase.RESETTING_BEFORE_BATCH: "resetting {env} before the batch of iteration {itr}",
    Phase.COMPUTING_ACTIONS: "computing actions with its agent {in_batch}",
    Phase.WAITING_FOR_ACTIONS: "waiting for actions from the master {in_batch}",
    Phase.STEPPING: "stepping {env} {in_batch}",
    Phase.RESETTING: "resetting {env} {in_batch}",
    Phase.FINISHING_BATCH: "finishing the batch of iteration {itr} (bootstrap value, last "
                           "observations)",
    Phase.REPLYING: "sending its reply {reply}",
    Phase.EVAL_RESETTING: "{in_eval}: resetting {eval_env}",
    Phase.EVAL_COMPUTING_ACTIONS: "{in_eval}: computing actions with its agent",
    Phase.EVAL_WAITING_FOR_ACTIONS: "{in_eval}: waiting for actions from the master",
    Phase.EVAL_STEPPING: "{in_eval}: stepping {eval_env}",
    Phase.EVAL_FINISHING: "finishing its evaluation (iteration {itr})",
}
