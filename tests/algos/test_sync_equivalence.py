"""Multi-rank equivalence: on identical data, two ranks of batch B/2 each give the same
parameters after one update as one rank of batch B (within 1e-5), for PPO, A2C and DQN.

The single-rank reference runs in this process on the whole batch; two real ranks (forked,
gloo on 127.0.0.1, agents wrapped in DistributedDataParallel) each run the same update on
their half of the batch columns (see ``tests/algos/_sync_ranks.py``). The optimizer is SGD,
so that the update is proportional to the gradient: Adam's first step is close to
``lr * sign(grad)`` and would hide most differences in the gradient's size.

The comparison is shown to be sharp: the same ranks with advantage normalization or
observation statistics computed per rank, or without the gradient all-reduce, end at least
100 times the tolerance away from the reference.
"""
import numpy as np
import pytest

from rlfast.agents import DqnAgent
from rlfast.algos.dqn import DQN
from rlfast.samplers.collections import BatchSpec

from tests.algos import _sync_ranks as sr
from tests.integration._guards import live_children

ATOL = 1e-5
SHARP = 100 * ATOL  # how far the broken variants must land from the reference


@pytest.fixture(scope="module")
def updates():
    """``(reference, ranks)``: every scenario's single-rank update in this process, and the
    two ranks' updates (one pair of forked ranks runs every scenario in turn)."""
    before = set(live_children())
    reference = {name: sr.run_update(name) for name in sr.SCENARIOS}
    ranks = sr.run_ranks(list(sr.SCENARIOS), world_size=2, timeout_s=120)
    assert set(live_children()) <= before, "a rank outlived run_ranks"
    return reference, ranks


def _max_diff(a: dict, b: dict, skip=()) -> float:
    assert set(a) == set(b)
    return max(float(np.abs(a[k] - b[k]).max()) for k in a if not any(s in k for s in skip))


def _assert_states_close(actual: dict, expected: dict, what: str) -> None:
    assert set(actual) == set(expected), what
    for key in expected:
        np.testing.assert_allclose(actual[key], expected[key], rtol=0, atol=ATOL,
                                   err_msg=f"{what}: {key}")


def _assert_equivalent(reference: dict, ranks: list, name: str) -> None:
    ref = reference[name]
    # The update did something (else any comparison would pass).
    assert _max_diff(ref["state"], ref["initial"], skip=("obs_norm",)) > 10 * SHARP
    for rank, result in enumerate(ranks):
        _assert_states_close(result[name]["state"], ref["state"], f"{name}, rank {rank}")
    # Both ranks hold exactly the same parameters (and statistics).
    first, second = ranks[0][name]["state"], ranks[1][name]["state"]
    for key in first:
        assert np.array_equal(first[key], second[key]), f"{name}: {key} differs between ranks"


# ---- PPO / A2C ------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["ppo_cat", "ppo_gauss_obsnorm", "a2c_cat"])
def test_two_ranks_match_one_rank_pg(updates, name):
    reference, ranks = updates
    _assert_equivalent(reference, ranks, name)
    # The gradient norm each rank clips is that of the global (averaged) gradient.
    ref_norm = reference[name]["opt_info"]["gradNorm"]
    for result in ranks:
        assert result[name]["opt_info"]["gradNorm"] == pytest.approx(ref_norm, rel=1e-5)
        assert len(result[name]["opt_info"]["loss"]) == 1  # one minibatch, one epoch


def test_gradient_clipping_is_active_in_the_clipped_scenario(updates):
    """ppo_gauss_obsnorm clips at 0.5: the comparison above covers a clipped update."""
    reference, _ = updates
    assert reference["ppo_gauss_obsnorm"]["opt_info"]["gradNorm"][0] > 2 * 0.5


def test_observation_statistics_are_pooled_over_ranks(updates):
    """Each rank's running observation statistics are those of the whole batch: count T*B,
    the global mean and variance (and they are not those of either half)."""
    reference, ranks = updates
    ref = reference["ppo_gauss_obsnorm"]["state"]
    keys = [k for k in ref if "obs_norm" in k]
    assert sorted(k.rsplit(".", 1)[1] for k in keys) == ["count", "mean", "var"]
    count_key = next(k for k in keys if k.endswith("count"))
    assert ref[count_key] == sr.T * sr.B
    for result in ranks:
        state = result["ppo_gauss_obsnorm"]["state"]
        for key in keys:
            np.testing.assert_allclose(state[key], ref[key], rtol=1e-6, atol=1e-6)
    # Per rank, the statistics would be those of its half: different (the halves differ).
    local = ranks[0]["ppo_gauss_local_obsnorm"]["state"]
    assert local[count_key] == sr.T * sr.B // 2
    mean_key = next(k for k in keys if k.endswith("mean"))
    assert np.abs(local[mean_key] - ref[mean_key]).max() > 0.1


def test_rank_local_advantage_normalization_would_fail(updates):
    """Advantages standardized with each rank's own mean and std (what pooling with
    global_mean_std prevents) give parameters far outside the tolerance."""
    reference, ranks = updates
    ref = reference["ppo_cat"]["state"]
    for result in ranks:
        assert _max_diff(result["ppo_cat_local_adv"]["state"], ref) > SHARP


def test_rank_local_observation_statistics_would_fail(updates):
    reference, ranks = updates
    ref = reference["ppo_gauss_obsnorm"]["state"]
    for result in ranks:
        # The weights themselves, not only the statistics, move elsewhere.
        assert _max_diff(result["ppo_gauss_local_obsnorm"]["state"], ref,
                         skip=("obs_norm",)) > SHARP


@pytest.mark.parametrize("name", ["ppo_cat_no_ddp", "dqn_no_ddp"])
def test_missing_gradient_all_reduce_would_fail(updates, name):
    """Without DistributedDataParallel each rank steps on its own half's gradient: the
    ranks drift apart and away from the reference."""
    reference, ranks = updates
    base = name.replace("_no_ddp", "")
    ref = reference[base]["state"]
    assert _max_diff(ranks[0][name]["state"], ranks[1][name]["state"]) > SHARP
    for result in ranks:
        assert _max_diff(result[name]["state"], ref) > SHARP


def test_ranks_hold_different_halves(updates):
    """The ranks trained on different data: each rank's first loss differs from the
    other's when nothing is averaged (no DDP), and from the whole batch's."""
    reference, ranks = updates
    losses = [r["ppo_cat_no_ddp"]["opt_info"]["loss"][0] for r in ranks]
    assert abs(losses[0] - losses[1]) > 1e-3
    assert all(abs(loss - reference["ppo_cat"]["opt_info"]["loss"][0]) > 1e-4 for loss in losses)


@pytest.mark.parametrize("name", ["ppo_cat_timeouts", "a2c_cat_timeouts"])
def test_two_ranks_match_one_rank_with_uneven_valid_steps(updates, name):
    """Losses are means over the valid steps of every rank (pooled count), not means of
    per-rank means: time-limit ends leave the halves with different valid counts."""
    reference, ranks = updates
    valid = sr.valid_counts(name)
    assert valid[0] != valid[1]  # the scenario's point: the halves differ in valid steps
    _assert_equivalent(reference, ranks, name)


# ---- DQN ------------------------------------------------------------------------------------
def test_two_ranks_match_one_rank_dqn(updates):
    reference, ranks = updates
    _assert_equivalent(reference, ranks, "dqn")
    ref = reference["dqn"]
    # The target network moved too (tau = 0.5 after the update), identically everywhere.
    assert _max_diff({k: v for k, v in ref["state"].items() if k.startswith("target.")},
                     {k: v for k, v in ref["initial"].items() if k.startswith("target.")}) > SHARP
    for result in ranks:
        r = result["dqn"]
        # Each rank asked its replay buffer for its share of the batch, once.
        assert r["requested"] == [sr.DQN_BATCH // 2]
        assert r["updates_per_optimize"] == ref["updates_per_optimize"] == 1
        assert r["min_itr_learn"] == ref["min_itr_learn"] == 0
        assert r["update_counter"] == 1 and len(r["opt_info"]["loss"]) == 1
        assert r["opt_info"]["gradNorm"] == pytest.approx(ref["opt_info"]["gradNorm"], rel=1e-5)
        # One replay buffer per rank, each with half the global capacity.
        assert r["rank_replay_size"] == ref["rank_replay_size"] // 2
    assert ref["requested"] == [sr.DQN_BATCH]


# ---- DQN's schedule over ranks (no process group needed) ---------------------------------------
def _dqn_initialize(world_size, batch_size=16, replay_size=64, B=4, replay_ratio=8):
    agent = DqnAgent(model_kwargs=dict(hidden_sizes=[4]))
    agent.initialize(sr.dqn_spaces())
    algo = DQN(batch_size=batch_size, min_steps_learn=64, replay_size=replay_size,
               replay_ratio=replay_ratio, eps_steps=640)
    algo.initialize(agent, n_itr=10, batch_spec=BatchSpec(2, B), mid_batch_reset=True,
                    examples=sr.dqn_examples(), world_size=world_size, rank=world_size - 1)
    return algo


def test_dqn_schedule_counts_the_steps_of_every_rank():
    """Two ranks of B envs sample what one rank of 2B does: the same updates per iteration,
    first learning iteration and epsilon schedule; each rank samples half of every batch
    and stores half of the replay."""
    one = _dqn_initialize(world_size=1, B=8)
    two = _dqn_initialize(world_size=2, B=4)
    assert two.sampler_bs == one.sampler_bs == 16
    assert two.updates_per_optimize == one.updates_per_optimize == 8
    assert two.min_itr_learn == one.min_itr_learn == 4
    assert two.agent.eps_itr_max == one.agent.eps_itr_max
    assert (two.replay_batch_size, one.replay_batch_size) == (8, 16)
    assert (two.rank_replay_size, one.rank_replay_size) == (32, 64)
    assert two.replay_buffer.size == 32 and one.replay_buffer.size == 64


def test_dqn_batch_size_must_divide_over_the_ranks():
    with pytest.raises(ValueError, match="batch_size=16 must divide evenly over 3 ranks"):
        _dqn_initialize(world_size=3)
    with pytest.raises(ValueError, match="world_size"):
        _dqn_initialize(world_size=0)
