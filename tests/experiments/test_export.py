"""``rlfast export``: the ONNX and TorchScript policies act as the rlfast agent does.

For each family (PPO on CartPole, PPO on Atari Pong, DQN, SAC, recurrent PPO) a short run is
trained, exported in both formats, and the files are run on 1,000 observations the agent
recorded: the same argmax actions, continuous actions within 1e-5. The reference is the
agent's own ``step`` in evaluation mode (greedy), one observation at a time as a sampler
calls it; a recurrent agent carries its state step by step through a recorded trajectory in
both."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from rlfast.cli import main
from rlfast.experiments.export import export_policy, record_observations
from rlfast.experiments.playback import load_trained_agent

pytest.importorskip("onnx")
onnxruntime = pytest.importorskip("onnxruntime")

N_OBS = 1000
RUNS = {
    "ppo-cartpole": ("ppo", "CartPole-v1", 2048, []),
    # One iteration of two Pong environments and short evaluations: what is checked is the
    # exported conv policy, for which a trained one is no different (Pong steps are slow).
    "ppo-pong": ("ppo", "atari:pong", 64, ["sampler.batch_B=2", "sampler.batch_T=32",
                                           "runner.log_interval_steps=64",
                                           "sampler.eval_n_envs=1",
                                           "sampler.eval_max_steps=20",
                                           "sampler.eval_max_trajectories=1"]),
    "dqn-cartpole": ("dqn", "CartPole-v1", 3000, ["algo.min_steps_learn=500"]),
    "sac-pendulum": ("sac", "Pendulum-v1", 300, ["algo.min_steps_learn=200",
                                                 "runner.log_interval_steps=300"]),
    "recurrent-ppo": ("ppo", "CartPole-v1", 2048, ["agent.recurrent=True", "agent.core=gru"]),
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    made = {}
    for name, (algo, env, steps, sets) in RUNS.items():
        run_dir = tmp_path_factory.mktemp(name)
        argv = ["train", algo, env, "--steps", str(steps), "--sampler", "serial", "--seed", "1",
                "--log-dir", str(run_dir), "--overwrite", "--no-progress", "--device", "cpu"]
        for item in sets:
            argv += ["--set", item]
        assert main(argv) == 0, name
        made[name] = run_dir
    return made


def _load_file(fmt, path, names):
    """The file, loaded once, as a function of its inputs (tensors) to its outputs (numpy):
    a recurrent policy is called step by step, and loading it again for each step would cost
    far more than running it."""
    if fmt == "torchscript":
        module = torch.jit.load(str(path))

        def run(*inputs):
            out = module(*inputs)
            return [o.detach().numpy() for o in (out if isinstance(out, tuple) else (out,))]
        return run
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return lambda *inputs: session.run(None, {n: x.numpy() for n, x in zip(names, inputs)})


@pytest.fixture(scope="module")
def references(runs):
    """Per run, the N_OBS observations its agent visits and the agent's own actions on them,
    made once for both formats (a thousand Atari steps cost more than the check itself)."""
    made = {}

    def reference(name):
        if name not in made:
            _, agent, make_env = load_trained_agent(runs[name])
            observations = record_observations(agent, make_env, N_OBS, seed=3)
            made[name] = observations, _agent_actions(agent, observations)
        return made[name]
    return reference


def _agent_actions(agent, observations):
    if hasattr(agent, "greedy_eval"):  # the exported policy is the deterministic one (argmax),
        agent.greedy_eval = True       # also for a run that samples when it evaluates (Atari PPO)
    agent.eval_mode(1)  # (at itr 0 a DQN agent evaluates with random actions)
    agent.reset()
    actions = []
    null = torch.as_tensor(np.asarray(agent.env_spaces.action.null_value()))[None]
    for obs in observations:
        actions.append(agent.step(obs[None], null, torch.zeros(1)).action[0])
    return torch.stack(actions).numpy()


def _check_actions(want, got, continuous):
    assert want.shape == got.shape
    if continuous:
        np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)
    else:
        assert np.array_equal(got, want), f"{int((got != want).sum())} actions differ"


@pytest.mark.parametrize("fmt", ["onnx", "torchscript"])
@pytest.mark.parametrize("name", ["ppo-cartpole", "ppo-pong", "dqn-cartpole", "sac-pendulum"])
def test_exported_policy_acts_as_the_agent(runs, references, name, fmt, tmp_path):
    # export_policy checks the file on observations of its own; on Pong the 256 it records
    # by default cost more than the export, and the 1,000 below check the file more closely
    check = {"check_observations": 2} if name == "ppo-pong" else {}
    path, checked = export_policy(runs[name], fmt, str(tmp_path / f"policy.{fmt}"), **check)
    assert checked
    observations, want = references(name)
    policy = _load_file(fmt, path, ["observation"])
    got = []
    for chunk in observations.split(250):  # batches of several sizes through one graph
        got.append(policy(chunk)[0])
    got.append(policy(observations[:1])[0])  # batch 1
    _check_actions(want, np.concatenate(got[:-1]), continuous=name.startswith("sac"))
    _check_actions(want[:1], got[-1], continuous=name.startswith("sac"))
    if name == "ppo-cartpole":  # not a constant policy: both actions occur
        assert set(np.unique(want)) == {0, 1}


@pytest.mark.parametrize("fmt", ["onnx", "torchscript"])
def test_recurrent_policy_carries_its_state_through_a_trajectory(runs, fmt, tmp_path):
    run = runs["recurrent-ppo"]
    path, _ = export_policy(run, fmt, str(tmp_path / f"policy.{fmt}"))
    policy = _load_file(fmt, path, ["observation", "prev_action", "prev_reward", "state_h"])
    _, agent, make_env = load_trained_agent(run)
    env = make_env(seed=4)
    agent.eval_mode(0)
    agent.reset()
    obs, prev_action, prev_reward = env.reset(), torch.zeros(1, dtype=torch.long), torch.zeros(1)
    h = torch.zeros(1, 1, agent.model.body.core.hidden_size)
    steps = 0
    for _ in range(N_OBS):
        o = torch.as_tensor(np.asarray(obs), dtype=torch.float32)[None]
        want = agent.step(o, prev_action, prev_reward).action
        got, h_next = policy(o, prev_action, prev_reward, h)
        assert np.array_equal(got, want.numpy())
        h = torch.as_tensor(h_next)
        obs, reward, done, _ = env.step(int(want[0]))
        prev_action, prev_reward = want, torch.tensor([float(reward)])
        steps += 1
        if done:  # a new episode: zero state, null previous action and reward
            obs = env.reset()
            agent.reset()
            h.zero_()
            prev_action, prev_reward = torch.zeros(1, dtype=torch.long), torch.zeros(1)
    env.close()
    assert steps == N_OBS


def test_stochastic_export_adds_the_distribution_and_bad_requests_are_one_line(runs, tmp_path,
                                                                            capsys):
    path, _ = export_policy(runs["ppo-cartpole"], "onnx", str(tmp_path / "p.onnx"),
                            stochastic=True)
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    assert [o.name for o in session.get_outputs()] == ["action", "prob"]
    probs = session.run(None, {"observation": np.zeros((3, 4), np.float32)})[1]
    np.testing.assert_allclose(probs.sum(-1), 1.0, atol=1e-6)
    assert main(["export", str(runs["dqn-cartpole"]), "--snapshot", "7"]) == 2
    assert "no snapshot of iteration 7" in capsys.readouterr().err
    assert main(["export", str(tmp_path), "--format", "torchscript"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("rlfast export: error:") and "\n" not in err
