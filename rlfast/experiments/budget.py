"""What a run's step budget buys, known before it starts: whole iterations, and the first
one in which the algorithm updates.

``rlfast train`` prints :func:`step_rounding_note` (a budget rounded up to whole iterations
of ``batch_T x batch_B`` steps) and :func:`learning_budget_warning` (a budget that ends
before a replay-based algorithm's first update); ``rlfast tune`` prunes a trial that would
not learn, unless its search space draws one of the keys that move the first update
(:func:`learning_start_keys`). Each reads a built, not yet started runner.
"""
from __future__ import annotations

import math
from typing import Any

from rlfast.algos.dqn.r2d1 import R2D1
from rlfast.runners.cadence import LogCadence

__all__ = ["LEARNING_START_KEYS", "SEQUENCE_KEYS", "run_iterations", "learning_start_keys",
           "first_learning_iteration", "async_update_lag", "learning_budget_warning",
           "step_rounding_note"]

# The config keys that decide whether a replay-based run learns within its budget (see
# first_learning_iteration), and R2D1's sequence keys that also do: rlfast tune refuses a
# search whose fixed budget cannot learn unless its space draws one of them.
LEARNING_START_KEYS = ("runner.n_steps", "algo.min_steps_learn", "sampler.batch_T",
                       "sampler.batch_B")
SEQUENCE_KEYS = ("algo.warmup_T", "algo.batch_T", "algo.n_step_return",
                 "algo.store_rnn_state_interval")


def run_iterations(runner: Any, world_size: int = 1) -> tuple[int, int]:
    """(iterations, environment steps per iteration) that a built, not yet started
    ``runner`` will train: its ``n_steps`` rounded up to whole iterations of every rank's
    batch (an asynchronous run samples as one rank), planned as the runner plans them at
    start-up (:class:`rlfast.runners.cadence.LogCadence`)."""
    ranks = 1 if getattr(runner.sampler, "is_async", False) else int(world_size)
    itr_steps = runner.sampler.env_steps_per_batch * ranks
    return LogCadence.plan(runner.n_steps, 1, itr_steps).n_itr, itr_steps


def _sequence_steps(algo: Any) -> int:
    """Steps of each environment that R2D1 needs before one whole replayed sequence (burn-in,
    training steps and n-step targets, from a stored state) exists; 0 for other algorithms."""
    if not isinstance(algo, R2D1):
        return 0
    return algo.warmup_T + algo.batch_T + algo.n_step_return + algo.store_rnn_state_interval


def learning_start_keys(algo: Any) -> tuple[str, ...]:
    """The config keys that move ``algo``'s first update (:func:`first_learning_iteration`):
    ``LEARNING_START_KEYS``, and ``SEQUENCE_KEYS`` for R2D1; none for an algorithm that
    learns from its first batch."""
    if getattr(algo, "min_steps_learn", None) is None:
        return ()
    return LEARNING_START_KEYS + (SEQUENCE_KEYS if isinstance(algo, R2D1) else ())


def first_learning_iteration(algo: Any, batch_spec: Any, ranks: int = 1) -> int:
    """The first iteration in which ``algo`` updates the agent, known before the run starts.

    A replay-based algorithm (one with ``min_steps_learn``: the DQN family, R2D1, DDPG, TD3,
    SAC) waits until ``min_steps_learn`` samples, ``batch_spec.size`` per rank and
    iteration, are in replay; R2D1 also until one whole sequence is (``_sequence_steps``).
    This is the ``min_itr_learn`` that their ``initialize`` computes; 0 for algorithms that
    learn from the first batch (PPO, A2C)."""
    min_steps = getattr(algo, "min_steps_learn", None)
    if min_steps is None:
        return 0
    first = int(min_steps) // (batch_spec.size * int(ranks))
    sequence = _sequence_steps(algo)
    if sequence:
        first = max(first, -(-sequence // batch_spec.T))
    return first


def async_update_lag(algo: Any, batch_spec: Any, itr_steps: int) -> int:
    """Iterations in replay from the first learning one on before an asynchronous run's
    optimizer may make its first ``optimize_agent`` call: its replay ratio must allow the
    call's ``updates_per_optimize`` updates (``round(replay_ratio * batch / batch_size)``,
    at least one) first, counting ``itr_steps`` steps per iteration, as
    :class:`rlfast.runners.replay_pace.ReplayPace` does; 1 for algorithms without a replay
    ratio. (A synchronous run updates in its first learning iteration: no lag.)"""
    ratio, batch_size = getattr(algo, "replay_ratio", None), getattr(algo, "batch_size", None)
    if not ratio or not batch_size:
        return 1
    per_call = max(1, round(ratio * batch_spec.size / batch_size))
    # Start just below the exact answer, then count up with ReplayPace's own rounding.
    lag = max(1, math.ceil(per_call * batch_size / (ratio * itr_steps)) - 1)
    while math.floor(ratio * lag * itr_steps / batch_size + 1e-9) < per_call:
        lag += 1
    return lag


def learning_budget_warning(algo_name: str, runner: Any, world_size: int = 1,
                            steps_label: str | None = None) -> str | None:
    """Why a built ``runner`` of ``algo_name`` would end before its algorithm's first
    update (its losses all empty), naming the budget (``steps_label``, default
    ``runner.n_steps=N``), where learning starts and what to change; None when it learns.
    ``rlfast train`` prints it as a warning and ``rlfast tune`` prunes such a trial."""
    algo, batch_spec = runner.algo, runner.sampler.batch_spec
    if getattr(algo, "min_steps_learn", None) is None:
        return None  # it learns from its first batch
    n_itr, itr_steps = run_iterations(runner, world_size)
    is_async = getattr(runner.sampler, "is_async", False)
    ranks = 1 if is_async else int(world_size)
    first = first_learning_iteration(algo, batch_spec, ranks)
    lag = async_update_lag(algo, batch_spec, itr_steps) if is_async else 1
    needed = first + lag - 1  # the iteration whose batch the first update needs in replay
    if n_itr > needed:
        return None
    label = steps_label or f"runner.n_steps={runner.n_steps}"
    sequence = _sequence_steps(algo)
    if sequence and first > int(algo.min_steps_learn) // (batch_spec.size * ranks):
        why = (f"{type(algo).__name__} replays whole sequences of algo.warmup_T + batch_T + "
               f"n_step_return + store_rnn_state_interval = {sequence} steps of each "
               f"environment")
        fix = "shorten those sequences"
    else:
        why, fix = f"algo.min_steps_learn={algo.min_steps_learn}", "lower algo.min_steps_learn"
    if lag > 1:
        why += (f"; then the asynchronous optimizer waits {lag} iterations for "
                f"algo.replay_ratio={algo.replay_ratio} to allow its first updates")
    return (f"{label} ends before {algo_name} starts learning: its first update comes after "
            f"{(needed + 1) * itr_steps} steps ({why}), so no loss would be logged; train "
            f"{needed * itr_steps + 1} steps or more, or {fix}")


def step_rounding_note(runner: Any, world_size: int = 1,
                       steps_label: str | None = None) -> str | None:
    """The line saying that a built ``runner`` trains more than its ``n_steps`` (named by
    ``steps_label``, default ``runner.n_steps=N``) because it trains whole iterations of
    ``batch_T x batch_B`` steps (times the ranks); None when the budget is a whole number
    of iterations."""
    n_itr, itr_steps = run_iterations(runner, world_size)
    if n_itr * itr_steps == runner.n_steps:
        return None
    sampler = runner.sampler
    ranks = itr_steps // sampler.env_steps_per_batch
    label = steps_label or f"runner.n_steps={runner.n_steps}"
    shape = f"sampler.batch_T={sampler.batch_spec.T} x sampler.batch_B={sampler.n_envs}"
    if ranks > 1:
        shape += f" x {ranks} ranks"
    return (f"{label} is rounded up to {n_itr * itr_steps} steps: whole iterations of "
            f"{itr_steps} steps ({shape})")
