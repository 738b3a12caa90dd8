"""The sampler boundary stops NaN / inf from the environment, naming where it came from.

Every sampler (serial; CPU: parallel worker processes; GPU: workers step the environments and
the master runs the agent, on the CPU here) checks each batch: an environment that returns
NaN in its observation, or an infinite reward, at a known step raises ``NonFiniteError``
naming the field, the time step, the iteration and the (global) environment index;
``check_finite=False`` lets the value through into the batch. End to end, ``rlfast train dqn``
on a registered environment that turns NaN cannot finish with exit 0: the sampler stops it,
and with the sampler check off the DQN loss check does.
"""
from __future__ import annotations

import math
import re

import pytest
import torch

from rlfast import cli
from rlfast.experiments import assembly
from rlfast.agents import CategoricalPgAgent, DqnAgent
from rlfast.samplers import CpuSampler, GpuSampler, SerialSampler
from rlfast.utils.finite import NonFiniteError, nonfinite_entries
from rlfast.utils.seed import set_seed
from tests.integration._guards import live_children
from tests.samplers._nan_envs import NanEnv, register_nan_env

SEED, T, B = 100, 4, 4
SAMPLERS = {"serial": SerialSampler, "cpu": CpuSampler, "gpu": GpuSampler}
# field, env step (1-based, of the bad env), env index, value, the agent that acts on it.
# A step's observation is stored at batch step divmod(k, T), its reward at divmod(k - 1, T).
CASES = {
    "nan-observation": ("observation", 6, 2, float("nan"), "dqn"),
    "inf-reward": ("reward", 3, 3, float("inf"), "pg"),
}


@pytest.fixture(autouse=True)
def _seeded():
    set_seed(99)


@pytest.fixture
def samplers():
    """Build samplers through this; every one is shut down and no child process outlives it."""
    made = []
    before = set(live_children())

    def factory(kind, case, check_finite=True):
        field, bad_step, env, value, agent_kind = CASES[case]
        sampler = SAMPLERS[kind](EnvCls=NanEnv, batch_T=T, batch_B=B, max_decorrelation_steps=0,
                                 env_kwargs=dict(bad_step=bad_step, field=field, value=value,
                                                 bad_seed=SEED + env),
                                 check_finite=check_finite)
        made.append(sampler)
        agent = (DqnAgent(model_kwargs=dict(hidden_sizes=[8])) if agent_kind == "dqn"
                 else CategoricalPgAgent(model_kwargs=dict(hidden_sizes=[8])))
        affinity = None if kind == "serial" else dict(workers_cpus=[[0], [1]])
        sampler.initialize(agent, seed=SEED, affinity=affinity)
        return sampler

    yield factory
    for sampler in made:
        sampler.shutdown()
    assert set(live_children()) - before == set()


def _where(case):
    field, bad_step, env, value, _ = CASES[case]
    itr, t = divmod(bad_step if field == "observation" else bad_step - 1, T)
    return field, itr, t, env, value


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("kind", sorted(SAMPLERS))
def test_nonfinite_env_output_raises_naming_field_step_and_env(samplers, kind, case):
    field, bad_itr, t, env, value = _where(case)
    sampler = samplers(kind, case)
    if kind != "serial":  # env 2 and 3 are stepped by the second worker
        assert sampler.n_envs_list == [2, 2]
    for itr in range(bad_itr):
        samples, _ = sampler.obtain_samples(itr)
        assert bool(torch.isfinite(samples.env.observation).all())
    expected = (f"non-finite {field} ({value}) at step {t} of iteration {bad_itr}, "
                f"environment {env}")
    with pytest.raises(NonFiniteError, match="^" + re.escape(expected)) as error:
        sampler.obtain_samples(bad_itr)
    assert "sampler.check_finite=False" in str(error.value)


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("kind", sorted(SAMPLERS))
def test_check_finite_false_lets_the_value_through(samplers, kind, case):
    field, bad_itr, t, env, value = _where(case)
    sampler = samplers(kind, case, check_finite=False)
    for itr in range(bad_itr + 2):
        samples, _ = sampler.obtain_samples(itr)
        data = getattr(samples.env, field)
        if itr == bad_itr:
            got = data[t, env, 2] if field == "observation" else data[t, env]
            assert (math.isnan(got) if math.isnan(value) else float(got) == value)
            bad = ~torch.isfinite(data)
            assert int(bad.sum()) == 1
        else:
            assert bool(torch.isfinite(data).all())


# ---------------------------------------------------------------- rlfast train, end to end
def _train(tmp_path, monkeypatch, *extra):
    """Run ``rlfast train dqn`` on the NaN environment; it must raise NonFiniteError, not
    return. Returns the message and the agent's state after the error."""
    runs = []
    configure = assembly.configure_train

    def recording_configure(args):
        runs.append(configure(args))
        return runs[-1]

    monkeypatch.setattr(assembly, "configure_train", recording_configure)
    argv = ["train", "dqn", register_nan_env(), "--steps", "3000", "--sampler", "serial",
            "--log-dir", str(tmp_path / "run"), "--no-progress", *extra]
    with pytest.raises(NonFiniteError) as error:
        status = cli.main(argv)
        pytest.fail(f"rlfast train returned {status} instead of raising NonFiniteError")
    assert len(runs) == 1
    return str(error.value), runs[0].runner.agent.state_dict()


def test_cli_train_dqn_stops_at_the_sampler(tmp_path, monkeypatch):
    """Each env instance turns NaN at its 200th step; 8 envs x T=4 (the DQN preset) put the
    first NaN observation at iteration 50, step 0, environment 0 -- after learning began."""
    message, state = _train(tmp_path, monkeypatch)
    assert message.startswith("non-finite observation (nan) at step 0 of iteration 50, "
                              "environment 0"), message
    assert nonfinite_entries(state) == []


def test_cli_train_dqn_without_sampler_check_stops_at_the_loss(tmp_path, monkeypatch):
    """With the sampler check off, NaN observations reach the replay buffer; the first update
    that replays one is refused before it reaches the weights."""
    message, state = _train(tmp_path, monkeypatch, "--set", "sampler.check_finite=False")
    found = re.match(r"DQN: loss is nan at iteration (\d+);", message)
    assert found, message
    assert int(found.group(1)) >= 50  # no NaN reached the replay before iteration 50
    assert nonfinite_entries(state) == []
