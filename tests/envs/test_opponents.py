"""Fixed opponents for pz: games (``env.opponent``, ``env.learners``): the wrapper passes
PettingZoo's parallel API test and drives the other players by the opponent; only the learners
become batch columns; a random opponent replays with its seed; a frozen snapshot plays the
role its run learned, and the mistakes are one-line configuration errors; end to end, a run
learns as second_0 against a frozen first_0 trained and exported a moment before (in
subprocesses)."""
from __future__ import annotations

import csv
import json
import os
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("pettingzoo")

from rlfast.envs.opponents import (  # noqa: E402
    OpponentParallelEnv, RandomOpponent, check_learners)
from rlfast.envs.pettingzoo import PettingZooEnv, PettingZooError  # noqa: E402
from rlfast.experiments.config import ConfigError  # noqa: E402
from rlfast.envs.policy_file import PolicyFileOpponent  # noqa: E402
from rlfast.experiments.opponents import make_opponent  # noqa: E402
from tests.envs._pz_toy import LeavingEnv  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOY = "tests.envs._pz_toy"
PONG = "pettingzoo.atari.pong_v3"


class Scripted:
    """An opponent that records what it saw and answers with its observation's step."""

    def __init__(self):
        self.seen, self.resets = [], []

    def reset(self, seed):
        self.resets.append(seed)

    def act(self, player, observation, action_space):
        self.seen.append((player, float(observation[0])))
        return int(observation[0]) % 3


def test_opponents_act_on_their_own_last_observation_and_learners_alone_are_agents():
    game = LeavingEnv(leave_at=2, length=4)
    opponent = Scripted()
    env = OpponentParallelEnv(game, opponent, learners=["a", "c"])
    assert env.possible_agents == ["a", "c"] and env.opponents == ["b"]
    obs, infos = env.reset(seed=3)
    assert sorted(obs) == ["a", "c"] and opponent.resets == [3]
    obs, rewards, terms, truncs, _ = env.step({"a": 1, "c": 2})
    assert game.history[-1] == {"a": 1, "c": 2, "b": 0}  # b acted on its reset observation (t=0)
    assert rewards == {"a": 11.0, "c": 32.0}
    env.step({"a": 0, "c": 0})
    assert game.history[-1]["b"] == 1  # its observation of step 1
    assert opponent.seen == [("b", 0.0), ("b", 1.0)]
    env.step({"a": 0, "c": 0})  # b has left: the learners play on alone
    assert set(game.history[-1]) == {"a", "c"}
    *_, truncs, _ = env.step({"a": 0, "c": 0})
    assert truncs == {"a": True, "c": True} and env.agents == []


def test_the_wrapper_passes_pettingzoos_parallel_api_test():
    from pettingzoo.test import parallel_api_test
    parallel_api_test(OpponentParallelEnv(LeavingEnv(), RandomOpponent(), "b"), num_cycles=30)


def test_a_random_opponent_replays_with_its_seed():
    def actions(seed):
        env = OpponentParallelEnv(LeavingEnv(leave_at=99, length=50), RandomOpponent(), "a")
        env.reset(seed=seed)
        for _ in range(20):
            env.step({"a": 0})
        return [(h["b"], h["c"]) for h in env.game.history if "b" in h]
    assert actions(1) == actions(1)
    assert actions(1) != actions(2)
    assert {a for pair in actions(1) for a in pair} == {0, 1, 2}


@pytest.mark.parametrize("learners, fragment", [
    (["x"], "['x'] are not players"), ([], "name one or more"),
    (["a", "b", "c"], "no player for the opponent")])
def test_bad_learners_name_the_players(learners, fragment):
    with pytest.raises(ValueError, match="player") as info:
        check_learners(learners, ["a", "b", "c"])
    assert fragment in str(info.value)
    assert check_learners(None, ["a", "b", "c"]) == ["a"]
    assert check_learners("c", ["a", "b", "c"]) == ["c"]
    assert check_learners(["c", "a"], ["a", "b", "c"]) == ["a", "c"]  # the game's order


def test_only_learners_are_columns_of_the_rlfast_env():
    env = PettingZooEnv(TOY, opponent=RandomOpponent(), learners=["a", "c"])
    assert env.n_agents == 2 and env.agent_names == ["a", "c"]
    assert PettingZooEnv.agents_per_env(TOY, opponent=RandomOpponent(), learners="c") == 1
    assert PettingZooEnv.agents_per_env(TOY) == 3
    observation = env.reset()
    assert observation.shape[0] == 2
    step = env.step(np.array([0, 0]))
    assert step.reward.tolist() == [10.0, 30.0]
    with pytest.raises(PettingZooError, match="not players"):
        PettingZooEnv(TOY, opponent=RandomOpponent(), learners="z")


def test_opponent_settings_are_checked_with_a_named_error(tmp_path):
    players = ["first_0", "second_0"]
    assert make_opponent(None, PONG, players, None) is None
    assert isinstance(make_opponent("random", PONG, players, None), RandomOpponent)
    with pytest.raises(ConfigError, match="needs env.opponent"):
        make_opponent(None, PONG, players, "second_0")
    with pytest.raises(ConfigError, match="not a file"):
        make_opponent(str(tmp_path / "missing.pt"), PONG, players, None)
    junk = tmp_path / "junk.pt"
    junk.write_bytes(b"not torchscript")
    with pytest.raises(ConfigError, match="not a TorchScript policy file"):
        make_opponent(str(junk), PONG, players, None)


def _policy_file(path, **info):
    """A TorchScript file with rlfast export's record: a graph that always plays action 1."""
    import torch

    class One(torch.nn.Module):
        def forward(self, observation):
            return (torch.ones(observation.shape[0], dtype=torch.long),)
    record = dict(env=f"pz:{PONG}", algo="ppo", learners=["second_0"], recurrent=False)
    record.update(info)
    torch.jit.script(One()).save(str(path), _extra_files={"rlfast.json": json.dumps(record)})
    return str(path)


@pytest.mark.parametrize("info, fragment", [
    (dict(env=f"pz:{TOY}"), "not pz:pettingzoo.atari.pong_v3"),
    (dict(recurrent=True), "recurrent policy"),
    (dict(learners=[]), "learned as ['first_0']"),
    (dict(learners=["first_0"]), "set env.learners")])
def test_a_policy_file_must_fit_the_game_and_the_role(tmp_path, info, fragment):
    path = _policy_file(tmp_path / "p.pt", **info)
    with pytest.raises(ConfigError) as error:
        make_opponent(path, PONG, ["first_0", "second_0"], None)  # the opponent is second_0
    assert fragment in str(error.value) and "\n" not in str(error.value)


def test_a_policy_file_opponent_plays_its_graph_and_pickles_as_its_path(tmp_path):
    import pickle
    path = _policy_file(tmp_path / "p.pt", learners=None)  # trained every player: any role
    opponent = make_opponent(path, PONG, ["first_0", "second_0"], None)
    assert isinstance(opponent, PolicyFileOpponent)
    assert opponent.act("second_0", np.zeros((4, 104, 80), np.uint8), None) == 1
    copy = pickle.loads(pickle.dumps(opponent))
    assert copy.path == path and copy._graph is None


def _train(log_dir, *sets, steps=128):
    pytest.importorskip("multi_agent_ale_py")
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    command = [sys.executable, "-m", "rlfast", "train", "ppo", f"pz:{PONG}", "--sampler",
               "serial", "--n-envs", "2", "--steps", str(steps), "--seed", "1", "--log-dir",
               str(log_dir), "--set", "sampler.batch_T=32", "--set", "sampler.eval_n_envs=0",
               "--set", "sampler.max_decorrelation_steps=0", "--set",
               "runner.log_interval_steps=64", "--set", "algo.minibatches=2", "--set",
               "algo.epochs=1"]
    for s in sets:
        command += ["--set", s]
    return subprocess.run(command, capture_output=True, text=True, timeout=240, env=env,
                          cwd=ROOT)


def test_a_run_learns_as_second_0_against_a_frozen_first_0(tmp_path):
    first = _train(tmp_path / "first", "env.opponent=random")
    assert first.returncode == 0, first.stderr[-3000:]
    with open(tmp_path / "first" / "progress.csv") as f:
        rows = list(csv.DictReader(f))
    assert int(float(rows[-1]["Diagnostics/CumSteps"])) == 128  # one column per env
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    policy = str(tmp_path / "first_0.pt")
    exported = subprocess.run(
        [sys.executable, "-m", "rlfast", "export", str(tmp_path / "first"), "--format",
         "torchscript", "-o", policy], capture_output=True, text=True, timeout=240, env=env,
        cwd=ROOT)
    assert exported.returncode == 0, exported.stderr[-3000:]
    wrong = _train(tmp_path / "wrong", f"env.opponent={policy}")
    assert wrong.returncode == 2
    assert "learned as ['first_0']" in wrong.stderr and "env.learners" in wrong.stderr
    second = _train(tmp_path / "second", f"env.opponent={policy}", "env.learners=second_0")
    assert second.returncode == 0, second.stderr[-3000:]
    params = json.loads((tmp_path / "second" / "params.json").read_text())
    assert params["config"]["env"]["learners"] == "second_0"
