"""The asynchronous runner (``AsyncRlEval``): the replay-ratio throttle, both copiers, the four
async samplers, parameters reaching the sampler (and its workers), and the configurations
it refuses.

Every run here is a small DQN on CartPole-v1 (``tests.integration._async_helpers``), trained
in this process with the sampler process (and, for the parallel samplers, its two workers)
forked from it; each run must leave no child process behind.
"""
from __future__ import annotations

import math
import time

import pytest
import torch

from rlfast.agents import CategoricalPgAgent, DqnAgent
from rlfast.agents.param_sharing import AsyncParams
from rlfast.algos import DQN, PPO
from rlfast.envs import make
from rlfast.experiments.presets import check_runner
from rlfast.runners import AsyncRlEval
from rlfast.samplers import AsyncSerialSampler, SerialSampler
from tests.integration._async_helpers import (SMALL_DQN, SMALL_EVAL, async_affinity,
                                              new_shm_entries, read_progress, shm_entries,
                                              small_dqn_runner)
from tests.integration._guards import live_children, watchdog  # noqa: F401 - fixture
from tests.learning._configs import train

ASYNC_COLUMNS = ("Diagnostics/ReplayRatio", "Diagnostics/SamplerItrPerSecond",
                 "Diagnostics/UpdatesPerSecond", "Diagnostics/PolicyLag")
HANG_GUARD_S = 180


def _learning_rows(rows: list[dict]) -> list[dict]:
    """The rows after the pre-training evaluation (CumSteps > 0)."""
    return [r for r in rows if r["Diagnostics/CumSteps"] > 0]


def _assert_async_columns_finite(rows: list[dict]) -> None:
    later = _learning_rows(rows)
    assert later, rows
    for row in later:
        for column in ASYNC_COLUMNS:
            assert column in row, (column, sorted(row))
            assert math.isfinite(row[column]), (column, row[column], row)
        assert row["Diagnostics/SamplerItrPerSecond"] > 0
    # Learning began after the first row: the later ones all made updates.
    assert all(r["Diagnostics/UpdatesPerSecond"] > 0 for r in later[1:]), later


# ---- the throttle ------------------------------------------------------------------------------
THROTTLE_S = 5.0  # ~25 log rows of 6,400 steps (15 s gave 73, with the same ratios)
THROTTLE_DQN = dict(SMALL_DQN, replay_ratio=0.25, batch_size=32, min_steps_learn=256)


class _TimedRun(AsyncRlEval):
    """Stops training ``duration`` seconds after the first batch arrived."""

    duration = THROTTLE_S

    def on_batch(self, itr, traj_infos):
        super().on_batch(itr, traj_infos)
        if not hasattr(self, "_first_batch_time"):
            self._first_batch_time = time.time()
        if time.time() - self._first_batch_time >= self.duration:
            self.stop_requested = True


def test_throttle_holds_replay_ratio_when_optimizer_is_faster(tmp_path, watchdog):  # noqa: F811
    """A 5 s run where the optimizer would outpace the allowed replay ratio: a 32-unit MLP,
    one update of 32 samples per 128-step batch of CartPole (replay ratio 0.25; the serial
    sampler's 128 environment steps take about 3x longer than one such update). The achieved
    ratio, updates x batch size / environment steps in replay since learning began, must stay
    within 10% of the target (and never above it), while the optimizer sits idle much of the
    time: the throttle, not the optimizer's speed, holds it."""
    watchdog(HANG_GUARD_S)
    runner = small_dqn_runner("serial", n_steps=100_000_000, log_interval_steps=6_400,
                              batch_T=8, batch_B=16, algo=DQN(**THROTTLE_DQN),
                              RunnerCls=_TimedRun)
    algo = runner.algo
    busy = [0.0]
    optimize = algo.optimize_agent

    def timed_optimize(*args, **kwargs):
        start = time.perf_counter()
        try:
            return optimize(*args, **kwargs)
        finally:
            busy[0] += time.perf_counter() - start

    algo.optimize_agent = timed_optimize
    start = time.time()
    train(runner, tmp_path, "throttle")
    wall = time.time() - start
    rows = read_progress(tmp_path)
    _assert_async_columns_finite(rows)

    target = algo.replay_ratio
    sampler_bs = runner.itr_batch_size
    assert (target * sampler_bs / algo.batch_size) == algo.updates_per_optimize == 1
    learn_steps = algo.min_itr_learn * sampler_bs
    # From progress.csv: the last row's cumulative updates and environment steps.
    last = rows[-1]
    steps = last["Diagnostics/CumSteps"] - learn_steps
    achieved_csv = last["Diagnostics/CumUpdates"] * algo.batch_size / steps
    # From the runner's state at the end (batches in replay, updates made).
    achieved_state = algo.update_counter * algo.batch_size / (
        (runner.pace.copied - algo.min_itr_learn) * sampler_bs)
    # Per row (after the first learning row), as the ReplayRatio column reports it.
    per_row = [r["Diagnostics/ReplayRatio"] for r in _learning_rows(rows)[1:]]
    idle = 1 - busy[0] / wall
    print(f"{wall:.1f} s, {len(rows)} rows, {last['Diagnostics/CumSteps']:.0f} steps, "
          f"{algo.update_counter} updates; achieved ratio {achieved_csv:.3f} (csv), "
          f"{achieved_state:.3f} (state), target {target}; per row {per_row}; "
          f"optimizer idle {idle:.0%}")
    assert wall >= THROTTLE_S
    assert len(per_row) >= 3, rows  # long enough to measure
    assert abs(achieved_csv - target) <= 0.1 * target, (achieved_csv, target)
    assert abs(achieved_state - target) <= 0.1 * target, (achieved_state, target)
    assert achieved_state <= target + 1e-9  # the throttle never lets it run ahead
    # The optimizer could have gone faster: it waited for batches a good part of the time.
    assert idle >= 0.3, f"optimizer busy {busy[0]:.1f} of {wall:.1f} s"
    assert live_children() == []


# ---- copiers and samplers -------------------------------------------------------------------
def _check_short_run(runner, result, tmp_path) -> list[dict]:
    rows = read_progress(tmp_path)
    algo = runner.algo
    assert result["cum_steps"] == runner.n_steps == 3_200
    # every batch reached replay
    assert runner.pace.copied == runner.pace.received == runner.n_itr == 100
    # The shared replay's cursor (rows of batch_B steps) moved by every batch: 3200 / 8 rows.
    assert runner.replay_buffer.t == runner.n_steps // runner.sampler.batch_spec.B == 400
    expected_updates = (runner.n_itr - algo.min_itr_learn) * algo.updates_per_optimize
    assert algo.update_counter == expected_updates, (algo.update_counter, expected_updates)
    assert [s for s, _ in result["eval_returns"]] == [0, 800, 1600, 2400, 3200]
    assert all(math.isfinite(r) and r >= 1 for _, r in result["eval_returns"])
    _assert_async_columns_finite(rows)
    assert live_children() == []
    return rows


@pytest.mark.parametrize("copier", ["optimizer", "process"])
def test_both_copiers_train(copier, tmp_path, watchdog):  # noqa: F811
    """Each copier fills replay with every batch, updates happen at the allowed ratio, and
    the async columns are present and finite (AsyncCpuSampler, two workers)."""
    watchdog(HANG_GUARD_S)
    before = shm_entries()
    runner = small_dqn_runner("cpu", copier=copier)
    copies = []
    to_buffer = runner.algo.samples_to_buffer
    runner.algo.samples_to_buffer = lambda samples: (copies.append(1), to_buffer(samples))[1]
    result = train(runner, tmp_path, f"copier_{copier}")
    _check_short_run(runner, result, tmp_path)
    # The master copies with copier="optimizer"; a copier process does it otherwise.
    assert len(copies) == (100 if copier == "optimizer" else 0)
    assert new_shm_entries(before) == []


@pytest.mark.parametrize("sampler", ["serial", "cpu", "gpu", "alternating"])
def test_each_async_sampler_runs_dqn_end_to_end(sampler, tmp_path, watchdog):  # noqa: F811
    """A short DQN CartPole run with each async sampler (two workers for the parallel ones):
    every batch reaches replay, the updates the ratio allows happen, evaluations run."""
    watchdog(HANG_GUARD_S)
    runner = small_dqn_runner(sampler)
    result = train(runner, tmp_path, f"sampler_{sampler}")
    _check_short_run(runner, result, tmp_path)
    if sampler != "serial":
        assert len(runner.async_affinity.sampler["workers_cpus"]) == 2


# ---- parameters reach the sampler -------------------------------------------------------------
def _checksum(model: torch.nn.Module) -> float:
    with torch.no_grad():
        return float(sum(p.detach().double().sum() for p in model.parameters()))


class _ProbeAgent(DqnAgent):
    """DqnAgent whose sampler workers record, in shared memory, the checksum of the
    parameters they act with; :func:`_probe_params` records what was published and pulled."""

    def step(self, observation, prev_action, prev_reward):
        if hasattr(self, "probe"):  # not for the example outputs, made before the board
            self.probe[3] = _checksum(self.model)
            self.probe[4] += 1
        return super().step(observation, prev_action, prev_reward)


def _probe_params(monkeypatch) -> None:
    """Make every :class:`AsyncParams` board of a ``_ProbeAgent`` record, on the agent, the
    checksum of every publication (master) and, in shared memory, what the sampler process
    pulled (update count, checksum, number of pulls)."""
    init, send, recv = AsyncParams.__init__, AsyncParams.send, AsyncParams.recv

    def probe_init(self, agent, ctx=None):
        init(self, agent, ctx)
        if isinstance(agent, _ProbeAgent):
            # [pulled updates, pulled checksum, pulls, worker checksum, worker steps]
            agent.probe = ctx.RawArray("d", 5)
            agent.published = {0: _checksum(agent.model)}

    def probe_send(self, agent, updates=0, wait=True):
        send(self, agent, updates, wait)  # on the CPU wait=False publishes at once
        if isinstance(agent, _ProbeAgent):
            agent.published[updates] = _checksum(agent.model)

    def probe_recv(self, agent):
        pulled = recv(self, agent)
        if pulled and isinstance(agent, _ProbeAgent):
            agent.probe[0] = self.sampler_updates
            agent.probe[1] = _checksum(agent.model)
            agent.probe[2] += 1
        return pulled

    monkeypatch.setattr(AsyncParams, "__init__", probe_init)
    monkeypatch.setattr(AsyncParams, "send", probe_send)
    monkeypatch.setattr(AsyncParams, "recv", probe_recv)


def test_parameters_reach_sampler_and_its_workers(tmp_path, watchdog,  # noqa: F811
                                                   monkeypatch):
    """The sampler process pulls the optimizer's published parameters (exactly: the checksum
    of what it holds equals the master's at that update count) many times, its workers act
    with published parameters, and the policy lag stays small."""
    watchdog(HANG_GUARD_S)
    _probe_params(monkeypatch)
    agent = _ProbeAgent(model_kwargs=dict(hidden_sizes=[32]), eps_eval=0.0)
    runner = small_dqn_runner("cpu", n_steps=6_400, log_interval_steps=1_600, agent=agent)
    result = train(runner, tmp_path, "params")
    rows = read_progress(tmp_path)
    pulled_updates, pulled_sum, pulls, worker_sum, worker_steps = list(agent.probe)
    updates = runner.algo.update_counter
    print(f"{updates} updates, {len(agent.published)} publications; the sampler pulled "
          f"{pulls:.0f} times, last at update {pulled_updates:.0f}; workers stepped "
          f"{worker_steps:.0f} times; lags {[r['Diagnostics/PolicyLag'] for r in rows]}")
    assert updates == (runner.n_itr - runner.algo.min_itr_learn) * 1 == 192
    assert len(agent.published) == updates + 1  # updates_per_sync=1: after every update
    # The sampler's last pull: a late publication, bit-identical to the optimizer's model then.
    assert pulled_updates >= 0.8 * updates, (pulled_updates, updates)
    assert pulled_sum == agent.published[int(pulled_updates)]
    assert pulled_sum != agent.published[0]
    assert pulls >= 0.5 * (runner.n_itr - runner.algo.min_itr_learn), pulls
    # The workers (AsyncCpuSampler) act with the pulled, shared parameters.
    # (one step call per worker and time step: 2 workers x 4 steps x 200 batches, + evals)
    assert worker_steps >= 2 * runner.n_itr * runner.sampler.batch_spec.T
    assert worker_sum in set(agent.published.values()) and worker_sum != agent.published[0]
    # PolicyLag: finite and small in every row (updates since the batch's parameters).
    lags = [r["Diagnostics/PolicyLag"] for r in _learning_rows(rows)]
    assert all(math.isfinite(lag) and 0 <= lag <= 20 for lag in lags), lags
    assert lags[-1] < 0.1 * rows[-1]["Diagnostics/CumUpdates"], lags
    assert len({r for _, r in result["eval_returns"]}) > 1  # evaluations changed
    assert live_children() == []


# ---- refused configurations ---------------------------------------------------------------------
def _async_sampler(**kwargs):
    return AsyncSerialSampler(EnvCls=make, env_kwargs=dict(id="CartPole-v1"), batch_T=4,
                              batch_B=2, max_decorrelation_steps=0, **{**SMALL_EVAL, **kwargs})


def test_optimizer_rank_lists_are_checked():
    """Several optimizer ranks are allowed (see test_async_ranks.py), but not none, and not a
    mix of GPU and CPU ranks (one process group has one backend)."""
    sampler = dict(workers_cpus=[[0], [1]])
    with pytest.raises(ValueError, match="'optimizer' list is empty"):
        AsyncRlEval(algo=DQN(**SMALL_DQN), agent=DqnAgent(), sampler=_async_sampler(),
                    n_steps=100, affinity=dict(optimizer=[], sampler=sampler))
    mixed = dict(optimizer=[dict(cuda_idx=0), dict(cuda_idx=None)], sampler=sampler)
    with pytest.raises(ValueError, match="all be on GPUs or all on the CPU") as caught:
        AsyncRlEval(algo=DQN(**SMALL_DQN), agent=DqnAgent(), sampler=_async_sampler(),
                    n_steps=100, affinity=mixed)
    assert "[0, None]" in str(caught.value)
    two = AsyncRlEval(algo=DQN(**SMALL_DQN), agent=DqnAgent(), sampler=_async_sampler(),
                      n_steps=100, affinity=dict(optimizer=[dict(cuda_idx=None)] * 2,
                                                 sampler=sampler))
    assert two.n_optimizers == 2


def test_synchronous_sampler_is_refused():
    sampler = SerialSampler(EnvCls=make, env_kwargs=dict(id="CartPole-v1"), batch_T=4,
                            batch_B=2, max_decorrelation_steps=0)
    with pytest.raises(TypeError, match="asynchronous sampler") as caught:
        AsyncRlEval(algo=DQN(**SMALL_DQN), agent=DqnAgent(), sampler=sampler, n_steps=100,
                    affinity=async_affinity())
    assert "SerialSampler" in str(caught.value)


def test_on_policy_algorithm_is_refused(tmp_path, watchdog):  # noqa: F811
    """PPO has no replay buffer: ``train`` fails with the algorithm's TypeError before any
    child process starts, and leaves nothing behind; the CLI check refuses it up front."""
    watchdog(HANG_GUARD_S)
    before = shm_entries()
    runner = AsyncRlEval(algo=PPO(), agent=CategoricalPgAgent(model_kwargs=dict(hidden_sizes=[8])),
                         sampler=_async_sampler(), n_steps=100, affinity=async_affinity(),
                         progress_bar=False)
    with pytest.raises(TypeError, match="does not support asynchronous runners"):
        train(runner, tmp_path, "ppo_async")
    assert runner.children.supervisor is None  # nothing was forked
    assert live_children() == []
    assert new_shm_entries(before) == []
    with pytest.raises(ValueError, match="replay-based algorithm"):
        check_runner("ppo", "async")
