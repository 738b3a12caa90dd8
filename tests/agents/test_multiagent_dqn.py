"""Independent DQN-family agents on multi-agent (pz:) columns: a departed agent's masked
steps carry the masked action and get zero weight in the loss, shared vs per-agent
parameters, the discrete-action check, and ``rlfast train dqn pz:...`` end to end."""
from __future__ import annotations

import functools
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("pettingzoo")

from rlfast.agents.dqn.multiagent import (MultiAgentDqnAgent, PerAgentQModel,  # noqa: E402
                                          check_discrete_multiagent)
from rlfast.algos import DQN  # noqa: E402
from rlfast.algos.dqn.dqn import MASKED_ACTION  # noqa: E402
from rlfast.envs.multiagent import MultiAgentTrajInfo  # noqa: E402
from rlfast.envs.pettingzoo import PettingZooEnv  # noqa: E402
from rlfast.samplers import SerialSampler  # noqa: E402
from rlfast.spaces.float_box import FloatBox  # noqa: E402
from rlfast.utils.collections import namedarraytuple  # noqa: E402

TOY = "tests.envs._pz_toy"
ROOT = Path(__file__).resolve().parents[2]


def _toy_batch(agent, batch_T=12):
    sampler = SerialSampler(
        EnvCls=PettingZooEnv, env_kwargs=dict(env=TOY, env_kwargs=dict(leave_at=2, length=5)),
        batch_T=batch_T, batch_B=1, max_decorrelation_steps=0,
        TrajInfoCls=functools.partial(MultiAgentTrajInfo, _agents=["a", "b", "c"]))
    sampler.examples = sampler.initialize(agent, seed=0)
    try:
        samples, _ = sampler.obtain_samples(0)
    finally:
        sampler.shutdown()
    return sampler, samples


def test_departed_agent_steps_are_marked_and_never_weigh_in_the_loss():
    torch.manual_seed(0)
    agent = MultiAgentDqnAgent(eps_init=1.0, eps_final=1.0)
    sampler, samples = _toy_batch(agent)
    valid = samples.env.env_info.valid
    assert not valid.all() and valid.any()  # agent "b" leaves at step 2 of each episode
    algo = DQN(batch_size=32, min_steps_learn=0, replay_size=120, delta_clip=None,
               discount=0.9)
    algo.initialize(agent, n_itr=10, batch_spec=sampler.batch_spec, mid_batch_reset=True,
                    examples=sampler.examples)
    assert algo.masked_steps
    stored = algo.samples_to_buffer(samples)
    assert torch.equal(stored.action == MASKED_ACTION, ~valid)
    assert torch.equal(stored.action[valid], samples.agent.action[valid])
    algo.replay_buffer.append_samples(stored)
    np.random.seed(0)
    batch = algo.replay_buffer.sample_batch(200)
    masked = batch.action == MASKED_ACTION
    assert masked.any() and (~masked).any()
    loss, priorities = algo.loss(batch)
    keep = torch.nonzero(~masked).squeeze(-1)
    only_valid = type(batch)(*[_take(field, keep) for field in batch])
    valid_loss, _ = algo.loss(only_valid)
    torch.testing.assert_close(loss, valid_loss)  # the masked transitions add nothing
    assert torch.all(priorities[masked] == 0)  # and a prioritized replay never redraws them
    # every valid column of the ring keeps its actions; single-agent batches are unmarked
    assert algo.samples_to_buffer(samples._replace(
        env=samples.env._replace(env_info=None))).action.min() >= 0


def _take(field, idx):
    if field is None:
        return None
    if hasattr(field, "_fields"):
        return type(field)(*[_take(f, idx) for f in field])
    return field[idx]




def test_shared_and_separate_parameters():
    torch.manual_seed(0)
    shared = MultiAgentDqnAgent()
    _, samples = _toy_batch(shared, batch_T=3)
    n_shared = sum(p.numel() for p in shared.model.parameters())
    separate = MultiAgentDqnAgent(shared=False)
    _toy_batch(separate, batch_T=3)
    model = separate.model
    assert isinstance(model, PerAgentQModel) and len(model.copies) == 3
    assert sum(p.numel() for p in model.parameters()) == 3 * n_shared
    obs = samples.env.observation  # [T, 3]: column k is agent k
    with torch.no_grad():
        q = model(obs, None, None)
        for k in range(3):  # each column gets its own agent's network
            torch.testing.assert_close(q[:, k], model.copies[k](obs[:, k], None, None))
        assert not torch.allclose(model.copies[0](obs[:, 0], None, None),
                                  model.copies[1](obs[:, 0], None, None))
    assert separate.target_model.copies[2] is not None  # the target network is per agent too
    with pytest.raises(ValueError, match="agent id"):
        PerAgentQModel((6,), 3, layout=(3, 0, 0), n_agents=3)


def test_continuous_actions_are_refused_with_the_fix():
    spaces = namedarraytuple("Spaces", ["observation", "action"])
    obs = FloatBox(-1, 1, shape=(4,))
    obs.layout = (2, 2, 0)
    with pytest.raises(ValueError, match="continuous_actions=False"):
        check_discrete_multiagent(spaces(obs, FloatBox(-1, 1, shape=(5,))), "X")
    with pytest.raises(ValueError, match="multi-agent environment"):
        check_discrete_multiagent(spaces(FloatBox(-1, 1, shape=(4,)), obs), "X")


@pytest.mark.parametrize("algo,sampler", [("dqn", "serial"), ("dqn", "cpu"),
                                          ("rainbow", "serial")])
def test_train_dqn_on_spread_end_to_end(tmp_path, algo, sampler):
    pytest.importorskip("mpe2")
    cmd = [sys.executable, "-m", "rlfast", "train", algo, "pz:mpe2.simple_spread_v3",
           "--steps", "240", "--sampler", sampler, "--n-envs", "2", "--log-dir",
           str(tmp_path / "run"), "--overwrite", "--no-progress",
           "--set", "env.kwargs.continuous_actions=False", "--set", "env.kwargs.max_cycles=10",
           "--set", "algo.min_steps_learn=120", "--set", "algo.batch_size=16",
           "--set", "runner.log_interval_steps=120", "--set", "sampler.eval_max_steps=40",
           "--set", "sampler.eval_n_envs=2", "--set", "sampler.eval_max_trajectories=2"]
    if algo == "dqn":
        cmd += ["--set", "agent.shared=False"] if sampler == "cpu" else []
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    (progress,) = (tmp_path / "run").rglob("progress.csv")
    assert len(progress.read_text().splitlines()) >= 2
