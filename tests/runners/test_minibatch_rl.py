"""Runners: logging schedule, snapshots, reproducibility, shutdown on error."""
import csv

import pytest
import torch

from rlfast.agents import CategoricalPgAgent
from rlfast.algos import A2C, PPO
from rlfast.envs import make
from rlfast.runners import MinibatchRl, MinibatchRlBase, MinibatchRlEval
from rlfast.samplers import SerialSampler
from rlfast.utils.logging import load_snapshot, logger_context


def _runner(RunnerCls=MinibatchRlEval, seed=3, n_steps=1024, algo=None, log_interval_steps=256,
            **kw):
    sampler = SerialSampler(EnvCls=make, env_kwargs=dict(id="CartPole-v1"), batch_T=32,
                            batch_B=4, max_decorrelation_steps=20, eval_n_envs=2,
                            eval_max_steps=400, eval_max_trajectories=4)
    agent = CategoricalPgAgent(model_kwargs=dict(hidden_sizes=[16]))
    algo = algo or PPO(learning_rate=1e-3, minibatches=2, epochs=2)
    return RunnerCls(algo=algo, agent=agent, sampler=sampler, n_steps=n_steps, seed=seed,
                     log_interval_steps=log_interval_steps, progress_bar=False, **kw)


def _returns(path):
    with open(path) as f:
        rows = list(csv.DictReader(f))
    return [(r["Diagnostics/CumSteps"], r["ReturnAverage"], r["ReturnMax"], r["lossAverage"])
            for r in rows]


def _train(tmp_path, name, **kw):
    runner = _runner(**kw)
    with logger_context(str(tmp_path / name), 0, name, {}, override_prefix=True,
                        snapshot_mode="last"):
        result = runner.train()
    return runner, result, tmp_path / name


def test_same_seed_same_progress(tmp_path):
    _, _, a = _train(tmp_path, "a", seed=11)
    _, _, b = _train(tmp_path, "b", seed=11)
    _, _, c = _train(tmp_path, "c", seed=12)
    ra, rb, rc = (_returns(d / "progress.csv") for d in (a, b, c))
    assert ra == rb
    assert ra != rc


def test_same_seed_same_progress_minibatch_rl(tmp_path):
    _, _, a = _train(tmp_path, "a", RunnerCls=MinibatchRl, seed=5)
    _, _, b = _train(tmp_path, "b", RunnerCls=MinibatchRl, seed=5)
    assert _returns(a / "progress.csv") == _returns(b / "progress.csv")


def test_log_schedule_and_snapshot(tmp_path):
    runner, result, d = _train(tmp_path, "s")
    rows = _returns(d / "progress.csv")
    assert [int(r[0]) for r in rows] == [0, 256, 512, 768, 1024]
    assert [s for s, _ in result["eval_returns"]] == [0, 256, 512, 768, 1024]
    snap = load_snapshot(d / "params.pkl")
    assert snap["itr"] == runner.n_itr - 1
    assert snap["cum_steps"] == 1024
    agent = CategoricalPgAgent(model_kwargs=dict(hidden_sizes=[16]))
    agent.initialize(make("CartPole-v1").spaces)
    agent.load_state_dict(snap["agent_state_dict"])
    for k, v in runner.agent.state_dict().items():
        assert torch.equal(v, agent.state_dict()[k])
    assert "state" in snap["optimizer_state_dict"]


def test_a_row_after_the_first_iteration_counts_its_steps(tmp_path):
    # log_interval_steps of one iteration (128 steps): iteration 0's own evaluation row comes
    # after 128 steps, not at 0 like the untrained agent's (the final line's "best ... at").
    runner = _runner(n_steps=256, log_interval_steps=128)
    with logger_context(str(tmp_path / "one"), 0, "one", {}, override_prefix=True):
        result = runner.train()
    assert [s for s, _ in result["eval_returns"]] == [0, 128, 256]
    rows = _returns(tmp_path / "one" / "progress.csv")
    assert [int(r[0]) for r in rows] == [0, 128, 256]


def test_a2c_runs(tmp_path):
    _, result, _ = _train(tmp_path, "a2c", algo=A2C(learning_rate=1e-3))
    assert result["cum_steps"] == 1024


class _Boom(PPO):
    def optimize_agent(self, itr, samples=None, sampler_itr=None):
        if itr == 2:
            raise RuntimeError("optimizer exploded")
        return super().optimize_agent(itr, samples)


def test_error_in_loop_still_shuts_down(tmp_path):
    runner = _runner(algo=_Boom(minibatches=1, epochs=1))
    closed = []
    original = runner.sampler.shutdown
    runner.sampler.shutdown = lambda: (closed.append(True), original())
    with logger_context(str(tmp_path / "e"), 0, "e", {}, override_prefix=True):
        with pytest.raises(RuntimeError, match="optimizer exploded"):
            runner.train()
    assert closed == [True]


def test_training_complete_is_logged_only_on_success(tmp_path):
    _train(tmp_path, "ok", n_steps=256)
    assert "Training complete." in (tmp_path / "ok" / "debug.log").read_text()
    runner = _runner(algo=_Boom(minibatches=1, epochs=1))
    with logger_context(str(tmp_path / "err"), 0, "err", {}, override_prefix=True):
        with pytest.raises(RuntimeError, match="optimizer exploded"):
            runner.train()
    debug_log = (tmp_path / "err" / "debug.log").read_text()
    assert "itr #1" in debug_log  # it logged until the failing iteration (itr 2)
    assert "Training complete." not in debug_log


def test_no_dead_attributes(tmp_path):
    runner, _, _ = _train(tmp_path, "d", n_steps=256)
    assert not hasattr(runner, "pbar")
    for cls in (MinibatchRlBase, MinibatchRl, MinibatchRlEval):
        assert "_eval" not in vars(cls)


def test_base_runner_is_abstract_and_checks_its_arguments():
    with pytest.raises(TypeError, match="abstract"):
        MinibatchRlBase(algo=None, agent=None, sampler=None, n_steps=10)
    with pytest.raises(ValueError, match="n_steps"):
        _runner(n_steps=0)
    with pytest.raises(ValueError, match="log_interval_steps"):
        MinibatchRl(algo=None, agent=None, sampler=None, n_steps=10, log_interval_steps=0)
