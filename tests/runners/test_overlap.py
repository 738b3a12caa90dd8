"""Overlapped on-policy sampling (``MinibatchRl(..., overlap=True)``).

What the docs promise, checked independently of the runner's own bookkeeping:

* batch k is collected by the sampling agent with the parameters published after update
  k-1, i.e. the learner's parameters before update max(k-1, 0): the values and action
  probabilities stored in the batch are recomputed from snapshots of the learner taken at the
  start of every ``optimize_agent``;
* the learner is a private twin of the sampling agent, published to it after every batch;
* ``PolicyLag`` / ``PolicyLagGradientSteps`` in progress.csv are the means over the log
  interval of 0 (batch 0) and 1 (later batches) iterations, 0 and epochs * minibatches
  gradient steps;
* refusals (off-policy algorithms, async samplers, multi-rank runners, a non-bool flag);
* failures in a background batch or during an update with a batch in flight end the run
  with the error and leave no thread, process or shared memory behind;
* evaluations use the sampling agent, between batches, with the published parameters;
* the CLI's ``runner.overlap`` key.
"""
from __future__ import annotations

import csv
import json
import math
import threading

import pytest
import torch

from rlfast.agents import CategoricalPgAgent, DqnAgent
from rlfast.algos import A2C, DQN, PPO
from rlfast.cli import main
from rlfast.envs import make
from rlfast.runners import MinibatchRl, MinibatchRlEval, SyncRl
from rlfast.samplers import AsyncSerialSampler, CpuSampler, SerialSampler
from rlfast.samplers.parallel.base import SamplerWorkerError
from rlfast.utils.logging import logger_context

from tests.integration._failing_envs import BoomEnv, SlowEnv
from tests.integration._guards import live_children
from tests.runners._sync_runners import new_shm_entries, shm_entries

CARTPOLE = dict(id="CartPole-v1")
SAMPLERS = {"serial": SerialSampler, "cpu": CpuSampler}
THREAD_NAME = "rlfast-overlap-sampler"
HIDDEN = [16]
# One torch thread in the master: the tiny models here gain nothing from more, and these
# tests are about the schedule, not the thread counts (test_threads_follow_work.py).
ONE_THREAD = dict(master_torch_threads=1)


def _sampler(kind="serial", batch_T=16, batch_B=4, EnvCls=make, env_kwargs=CARTPOLE,
             SamplerCls=None, **kwargs):
    SamplerCls = SamplerCls or SAMPLERS[kind]
    return SamplerCls(EnvCls=EnvCls, env_kwargs=dict(env_kwargs), batch_T=batch_T,
                      batch_B=batch_B, max_decorrelation_steps=0, **kwargs)


def _ppo(PpoCls=PPO, **kwargs):
    settings = dict(learning_rate=1e-2, minibatches=2, epochs=2, linear_lr_schedule=False)
    settings.update(kwargs)
    return PpoCls(**settings)


def _runner(sampler, algo=None, n_itr=5, log_every=None, RunnerCls=MinibatchRl, seed=3,
            agent=None, affinity=ONE_THREAD, **kwargs):
    batch = sampler.batch_spec.size
    return RunnerCls(algo=algo or _ppo(), agent=agent or CategoricalPgAgent(
                         model_kwargs=dict(hidden_sizes=HIDDEN)),
                     sampler=sampler, n_steps=n_itr * batch, seed=seed, affinity=affinity,
                     log_interval_steps=(log_every or n_itr) * batch, progress_bar=False,
                     **kwargs)


def _train(runner, log_dir):
    with logger_context(str(log_dir), 0, "overlap", {}, override_prefix=True,
                        snapshot_mode="none"):
        return runner.train()


def _rows(log_dir):
    with open(log_dir / "progress.csv", newline="") as f:
        return list(csv.DictReader(f))


def _overlap_threads():
    return [t for t in threading.enumerate() if t.name == THREAD_NAME and t.is_alive()]


# ---- the batches are one update stale, and the learner is a published private twin ----------
class SnapshotPPO(PPO):
    """PPO that keeps, at the start of each ``optimize_agent``, a copy of the learner's
    parameters (theta_itr) and of the batch's inputs and stored agent infos."""

    def initialize(self, *args, **kwargs):
        super().initialize(*args, **kwargs)
        self.records = []

    def optimize_agent(self, itr, samples=None, sampler_itr=None):
        self.records.append(dict(
            itr=itr, state={k: v.clone() for k, v in self.agent.state_dict().items()},
            observation=samples.env.observation.clone(),
            prev_action=samples.agent.prev_action.clone(),
            prev_reward=samples.env.prev_reward.clone(),
            value=samples.agent.agent_info.value.clone(),
            prob=samples.agent.agent_info.dist_info.prob.clone(),
            bootstrap_value=samples.agent.bootstrap_value.clone()))
        return super().optimize_agent(itr, samples)


def _model_outputs(state, observation, prev_action, prev_reward):
    """(action probabilities, value) of a freshly built model holding ``state``."""
    agent = CategoricalPgAgent(model_kwargs=dict(hidden_sizes=HIDDEN))
    agent.initialize(make("CartPole-v1").spaces)
    agent.load_state_dict(state)
    with torch.no_grad():
        return agent.model(observation, prev_action, prev_reward)


def _max_diff(a, b):
    return float((a - b).abs().max())


@pytest.mark.parametrize("kind", ["serial", "cpu"])
def test_batches_are_sampled_with_the_parameters_before_the_previous_update(kind):
    leaks = _Leaks()
    n_itr = 5
    algo = _ppo(SnapshotPPO)
    agent = CategoricalPgAgent(model_kwargs=dict(hidden_sizes=HIDDEN))
    # The runner's defaults for this sampler (threads follow the work; cpu: default workers).
    runner = _runner(_sampler(kind), algo=algo, agent=agent, n_itr=n_itr, affinity=None,
                     overlap=True)
    runner.train()
    records = algo.records
    assert [r["itr"] for r in records] == list(range(n_itr))
    thetas = [r["state"] for r in records]
    # The learning rate moves the parameters (and the values) between updates.
    for k in range(1, n_itr):
        assert any(_max_diff(thetas[k][n], thetas[k - 1][n]) > 1e-3 for n in thetas[k])
    for k, rec in enumerate(records):
        inputs = (rec["observation"], rec["prev_action"], rec["prev_reward"])
        prob, value = _model_outputs(thetas[max(k - 1, 0)], *inputs)
        assert _max_diff(value, rec["value"]) < 1e-5, f"batch {k}"
        assert _max_diff(prob, rec["prob"]) < 1e-5, f"batch {k}"
        if k >= 2:  # not the learner's current parameters: one update stale
            _, current = _model_outputs(thetas[k], *inputs)
            assert _max_diff(current, rec["value"]) > 1e-3, f"batch {k}"
        if k + 1 < n_itr:  # V(s_T) of batch k, by the same parameters, on batch k+1's s_0
            nxt = records[k + 1]
            _, boot = _model_outputs(thetas[max(k - 1, 0)], nxt["observation"][0],
                                     nxt["prev_action"][0], nxt["prev_reward"][0])
            assert _max_diff(boot, rec["bootstrap_value"][0]) < 1e-5, f"batch {k}"

    # The learner is a private twin; the passed-in agent samples and got the last update.
    sampling, learner = runner.sampling_agent, runner.agent
    assert sampling is agent and learner is not agent
    assert runner.algo.agent is learner
    learner_state, sampling_state = learner.state_dict(), sampling.state_dict()
    assert learner_state.keys() == sampling_state.keys()
    for name in learner_state:
        assert torch.equal(learner_state[name], sampling_state[name]), name
        assert learner_state[name].data_ptr() != sampling_state[name].data_ptr(), name
    # ... and that last update moved the parameters past those of the last batch.
    assert any(_max_diff(learner_state[n], thetas[-1][n]) > 1e-3 for n in learner_state)
    assert not any(p.is_shared() for p in learner.model.parameters())
    shared = [p.is_shared() for p in sampling.model.parameters()]
    assert all(shared) if kind == "cpu" else not any(shared)
    leaks.check()  # the background thread ended with the run (and the cpu workers)


def test_overlapped_serial_runs_are_reproducible():
    """Same seed, same run: two runners, and a second ``train()`` of the first (which drops
    the twin of its first run and starts again from the sampling agent)."""
    algos = [_ppo(SnapshotPPO), _ppo(SnapshotPPO)]
    runners = [_runner(_sampler("serial", batch_T=8), algo=algo, n_itr=4, overlap=True)
               for algo in algos]
    runs = []
    for runner in (runners[0], runners[1], runners[0]):
        runner.train()
        runs.append(runner.algo.records)
    assert runs[0] is not runs[2]
    for other in runs[1:]:
        assert len(other) == len(runs[0]) == 4
        for a, b in zip(runs[0], other):
            assert torch.equal(a["value"], b["value"])
            assert torch.equal(a["observation"], b["observation"])
            for name in a["state"]:
                assert torch.equal(a["state"][name], b["state"][name])


# ---- PolicyLag columns ---------------------------------------------------------------------
def _interval_means(values, log_every, n_itr):
    """Means of ``values`` (one per iteration) over the runner's log intervals."""
    rows, start = [], 0
    for itr in range(n_itr):
        if (itr + 1) % log_every == 0 or itr == n_itr - 1:
            rows.append(sum(values[start:itr + 1]) / (itr + 1 - start))
            start = itr + 1
    return rows


@pytest.mark.parametrize("algo_name", ["ppo", "a2c"])
def test_policy_lag_columns(algo_name, tmp_path):
    n_itr, log_every, epochs, minibatches = 7, 3, 2, 4
    if algo_name == "ppo":
        algo = _ppo(epochs=epochs, minibatches=minibatches)
        steps_per_update = epochs * minibatches  # batches of 32 split evenly into 4
    else:
        algo = A2C(learning_rate=1e-3)
        steps_per_update = 1
    runner = _runner(_sampler("serial", batch_T=8, batch_B=4), algo=algo, n_itr=n_itr,
                     log_every=log_every, overlap=True)
    _train(runner, tmp_path)
    rows = _rows(tmp_path)
    assert [int(r["Diagnostics/Iteration"]) for r in rows] == [2, 5, 6]
    lag = [float(r["Diagnostics/PolicyLag"]) for r in rows]
    lag_steps = [float(r["Diagnostics/PolicyLagGradientSteps"]) for r in rows]
    # Batch 0 was sampled by the initial parameters, which the learner still has (lag 0);
    # every later batch by those before the previous update (lag 1 = one optimize_agent).
    per_itr = [0] + [1] * (n_itr - 1)
    assert lag == pytest.approx(_interval_means(per_itr, log_every, n_itr))
    assert lag == pytest.approx([2 / 3, 1.0, 1.0])
    assert lag_steps == pytest.approx(_interval_means(
        [steps_per_update * x for x in per_itr], log_every, n_itr))
    assert lag_steps[1:] == [float(steps_per_update)] * 2
    # The gradient steps the lag counts are those the algorithm takes.
    assert [int(float(r["Diagnostics/CumUpdates"])) for r in rows] == [
        steps_per_update * (int(r["Diagnostics/Iteration"]) + 1) for r in rows]


def test_no_policy_lag_columns_without_overlap(tmp_path):
    runner = _runner(_sampler("serial", batch_T=8, batch_B=4), n_itr=4, log_every=2)
    _train(runner, tmp_path)
    rows = _rows(tmp_path)
    assert len(rows) == 2
    assert not [k for k in rows[0] if "PolicyLag" in k]


# ---- overlap=False is the synchronous schedule -----------------------------------------------
def _eval_run(**overlap):
    sampler = _sampler("serial", batch_T=16, batch_B=4, eval_n_envs=2, eval_max_steps=200,
                       eval_max_trajectories=2)
    runner = _runner(sampler, n_itr=6, log_every=2, RunnerCls=MinibatchRlEval, seed=7,
                     **overlap)
    result = runner.train()
    return result["eval_returns"], runner.agent.state_dict()


def test_overlap_false_is_the_default_synchronous_schedule():
    default_returns, default_state = _eval_run()
    off_returns, off_state = _eval_run(overlap=False)
    _, on_state = _eval_run(overlap=True)
    assert off_returns == default_returns
    assert len(default_returns) == 4
    for name in default_state:
        assert torch.equal(off_state[name], default_state[name]), name
    # The comparison can tell schedules apart: the overlapped one trains differently.
    assert any(not torch.equal(on_state[n], default_state[n]) for n in default_state)


# ---- refusals --------------------------------------------------------------------------------
def test_overlap_must_be_a_bool():
    for value in ("yes", 1, None):
        with pytest.raises(TypeError, match="overlap"):
            _runner(_sampler(), overlap=value)


def test_off_policy_algorithm_is_refused_and_pointed_to_async_rl():
    sampler = _sampler("serial", batch_T=4, batch_B=2)
    runner = MinibatchRl(algo=DQN(min_steps_learn=16, replay_size=100, batch_size=8),
                         agent=DqnAgent(model_kwargs=dict(hidden_sizes=[8])),
                         sampler=sampler, n_steps=64, seed=1, progress_bar=False,
                         overlap=True)
    leaks = _Leaks()
    with pytest.raises(ValueError, match="AsyncRl") as info:
        runner.train()
    assert "DQN" in str(info.value)
    leaks.check()


def test_async_sampler_is_refused():
    runner = _runner(_sampler(SamplerCls=AsyncSerialSampler, batch_T=4, batch_B=2),
                     overlap=True)
    leaks = _Leaks()
    with pytest.raises(ValueError, match="AsyncSerialSampler"):
        runner.train()
    leaks.check()


def test_multi_rank_runner_is_refused():
    with pytest.raises(ValueError, match="overlap"):
        SyncRl(algo=_ppo(), agent=CategoricalPgAgent(), sampler=_sampler(), n_steps=64,
               overlap=True)


# ---- failures --------------------------------------------------------------------------------
class ThreadNamingBoomEnv(BoomEnv):
    """BoomEnv whose error also names the thread that stepped it."""

    def step(self, action):
        try:
            return super().step(action)
        except RuntimeError as error:
            raise RuntimeError(f"{error} in thread {threading.current_thread().name}") from None


class _Leaks:
    """What a run may not leave behind: a background sampling thread, a child process, a
    /dev/shm entry (each compared with what was there before the run)."""

    def __init__(self):
        self.threads = set(_overlap_threads())
        self.children = set(live_children())
        self.shm = shm_entries()

    def check(self):
        assert set(_overlap_threads()) <= self.threads
        assert set(live_children()) <= self.children
        assert new_shm_entries(self.shm) == []


@pytest.mark.parametrize("kind", ["serial", "cpu"])
def test_env_error_in_a_background_batch_ends_the_run_cleanly(kind, tmp_path):
    leaks = _Leaks()
    batch_T = 8
    # Each env fails on its 20th step: in batch 2 (steps 17-24), which is collected in the
    # background while the learner trains on batch 1.
    sampler = _sampler(kind, batch_T=batch_T, batch_B=2, EnvCls=ThreadNamingBoomEnv,
                       env_kwargs=dict(fail_after=2 * batch_T + 4))
    runner = _runner(sampler, n_itr=5, overlap=True)
    expected = RuntimeError if kind == "serial" else SamplerWorkerError
    with pytest.raises(expected, match="boom-123") as info:
        _train(runner, tmp_path)
    if kind == "serial":
        assert type(info.value) is RuntimeError
        assert f"in thread {THREAD_NAME}" in str(info.value)
    assert runner.itrs_done == 1  # itr 1 trained, then its next batch failed
    leaks.check()


class _InterruptingPPO(PPO):
    """Raises KeyboardInterrupt at ``itr`` once the next batch is being collected."""

    def __init__(self, itr, in_flight, **kwargs):
        super().__init__(learning_rate=1e-3, minibatches=1, epochs=1, **kwargs)
        self.itr, self.in_flight = itr, in_flight

    def optimize_agent(self, itr, samples=None, sampler_itr=None):
        if itr == self.itr:
            assert self.in_flight.wait(30), "the next batch never started"
            raise KeyboardInterrupt
        return super().optimize_agent(itr, samples)


def _flagging(SamplerCls, itr, flag):
    class Flagging(SamplerCls):
        def obtain_samples(self, sample_itr, db_idx=None):
            if sample_itr == itr:
                flag.set()
            return super().obtain_samples(sample_itr, db_idx)

    return Flagging


@pytest.mark.parametrize("kind", ["serial", "cpu"])
def test_interrupt_with_a_batch_in_flight_ends_the_run_cleanly(kind, tmp_path):
    leaks = _Leaks()
    in_flight = threading.Event()
    # Slow steps (10 ms): batch 3, started before the update of itr 2, is still under way
    # when that update raises.
    sampler = _sampler(kind, batch_T=8, batch_B=2, EnvCls=SlowEnv,
                       env_kwargs=dict(delay=0.01),
                       SamplerCls=_flagging(SAMPLERS[kind], 3, in_flight))
    runner = _runner(sampler, algo=_InterruptingPPO(2, in_flight), n_itr=6, overlap=True)
    with pytest.raises(KeyboardInterrupt):
        _train(runner, tmp_path)
    assert in_flight.is_set()
    assert runner.itrs_done == 2
    leaks.check()
    debug_log = (tmp_path / "debug.log").read_text()
    assert "Training interrupted by Ctrl-C (SIGINT) after 2 iterations" in debug_log


# ---- evaluation ------------------------------------------------------------------------------
class _EvalRecordingAgent(CategoricalPgAgent):
    """Records each ``eval_mode`` call's iteration on the instance (a twin gets its own
    list)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.eval_calls = []

    def eval_mode(self, itr):
        self.eval_calls.append(itr)
        super().eval_mode(itr)


class _EvalCheckingSampler(SerialSampler):
    """Records, at each evaluation, whether a batch is being collected meanwhile and whether
    the acting agent holds the learner's (``runner.agent``) parameters."""

    runner = None

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.sampling = False
        self.evaluations = []

    def obtain_samples(self, itr, db_idx=None):
        self.sampling = True
        try:
            return super().obtain_samples(itr, db_idx)
        finally:
            self.sampling = False

    def evaluate_agent(self, itr):
        learner = self.runner.agent.state_dict()
        acting = self.agent.state_dict()
        self.evaluations.append(dict(
            itr=itr, during_sampling=self.sampling, agent=self.agent,
            published=all(torch.equal(acting[k], learner[k]) for k in learner)))
        return super().evaluate_agent(itr)


def test_evaluations_use_the_sampling_agent_at_every_log_interval(tmp_path):
    batch_T, batch_B, n_itr, log_every = 8, 4, 6, 2
    sampler = _sampler(SamplerCls=_EvalCheckingSampler, batch_T=batch_T, batch_B=batch_B,
                       eval_n_envs=2, eval_max_steps=200, eval_max_trajectories=2)
    agent = _EvalRecordingAgent(model_kwargs=dict(hidden_sizes=HIDDEN))
    runner = _runner(sampler, agent=agent, n_itr=n_itr, log_every=log_every,
                     RunnerCls=MinibatchRlEval, overlap=True)
    sampler.runner = runner
    result = _train(runner, tmp_path)

    batch = batch_T * batch_B
    log_itrs = [itr for itr in range(n_itr) if (itr + 1) % log_every == 0]
    assert [s for s, _ in result["eval_returns"]] == [0] + [(i + 1) * batch for i in log_itrs]
    assert all(not math.isnan(r) for _, r in result["eval_returns"])
    # Every evaluation (the pre-training one at itr 0, then one per log interval) put the
    # sampling agent, the one passed in, in eval mode (the runner, then the serial eval
    # collector: twice per evaluation); the learner never.
    calls = agent.eval_calls
    assert [c for i, c in enumerate(calls) if i == 0 or calls[i - 1] != c] == [0] + log_itrs
    assert runner.agent is not agent and runner.agent.eval_calls == []
    evaluations = sampler.evaluations
    assert [e["itr"] for e in evaluations] == [0] + log_itrs
    assert all(e["agent"] is agent for e in evaluations)
    assert not any(e["during_sampling"] for e in evaluations)
    # Each with the learner's parameters: the twin's copy before training, then the
    # published ones.
    assert all(e["published"] for e in evaluations)
    rows = _rows(tmp_path)
    assert [r["Diagnostics/PolicyLag"] for r in rows][0] == ""  # the pre-training row
    assert [float(r["Diagnostics/PolicyLag"]) for r in rows[1:]] == [0.5, 1.0, 1.0]


# ---- the command line ------------------------------------------------------------------------
def test_cli_overlap_with_bf16_autocast(tmp_path, capsys):
    log_dir = tmp_path / "run"
    code = main(["train", "ppo", "CartPole-v1", "--steps", "4096", "--n-envs", "4",
                 "--log-dir", str(log_dir), "--no-progress", "--snapshot-mode", "none",
                 "--set", "runner.overlap=True", "--set", "agent.autocast=bf16",
                 "--set", "sampler.batch_T=128", "--set", "runner.log_interval_steps=1024",
                 "--set", "sampler.eval_n_envs=2", "--set", "sampler.eval_max_steps=400",
                 "--set", "sampler.eval_max_trajectories=2",
                 "--set", "sampler.max_decorrelation_steps=0"])
    assert code == 0
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith(
        "Final evaluation return")
    config = json.loads((log_dir / "params.json").read_text())["config"]
    assert config["runner"]["overlap"] is True and config["agent"]["autocast"] == "bf16"
    rows = _rows(log_dir)
    assert [int(r["Diagnostics/CumSteps"]) for r in rows] == [0, 1024, 2048, 3072, 4096]
    # 512 steps per iteration, 2 iterations per row: lags 0 and 1, then 1 and 1.
    assert [float(r["Diagnostics/PolicyLag"]) for r in rows[1:]] == [0.5, 1.0, 1.0, 1.0]
    assert float(rows[-1]["Diagnostics/PolicyLagGradientSteps"]) == 16.0  # 4 epochs x 4


def test_cli_overlap_is_not_a_dqn_key(tmp_path, capsys):
    code = main(["train", "dqn", "CartPole-v1", "--log-dir", str(tmp_path / "x"),
                 "--no-progress", "--set", "runner.overlap=True"])
    assert code == 2
    err = capsys.readouterr().err
    assert "runner.overlap" in err
    assert not (tmp_path / "x").exists()


# ---- the batch sources, alone ------------------------------------------------------------------
class _FakeSampler:
    """``obtain_samples(itr)``: a tensor filled with ``itr`` and one trajectory named by it;
    every call recorded (with ``fail_at``, that iteration raises)."""

    def __init__(self, events, fail_at=None):
        self.events, self.fail_at = events, fail_at

    def obtain_samples(self, itr):
        self.events.append(("obtain", itr))
        if itr == self.fail_at:
            raise RuntimeError(f"planted at {itr}")
        return torch.full((2,), float(itr)), [dict(Return=float(itr))]


class _FakeAgent:
    def __init__(self, events, name):
        self.events, self.name = events, name

    def sample_mode(self, itr):
        self.events.append((self.name, "sample_mode", itr))


class _FakeAlgo:
    update_counter = 0


def test_serial_batches_collect_each_batch_before_it_is_trained_on():
    from rlfast.runners.overlap import SerialBatches

    events = []
    batches = SerialBatches(_FakeSampler(events), _FakeAgent(events, "agent"))
    samples = batches.begin(3, 5)
    assert events == [("agent", "sample_mode", 3), ("obtain", 3)]
    assert torch.equal(samples, torch.full((2,), 3.0))
    assert batches.end(3, 5) == [dict(Return=3.0)]
    batches.stop()


def test_overlapped_batches_train_on_a_copy_and_publish_between_batches(monkeypatch):
    """Batch itr+1 is collected while the learner trains on the copy of batch itr; after
    each, the learner's parameters go to the sampling agent; each batch's lag is how many
    iterations and updates the parameters it was sampled with trailed."""
    from rlfast.runners import overlap

    events, lags, algo = [], [], _FakeAlgo()
    monkeypatch.setattr(overlap, "publish_to", lambda learner, sampling: events.append(
        ("publish", algo.update_counter)))
    batches = overlap.OverlappedBatches(_FakeSampler(events), _FakeAgent(events, "sampling"),
                                        _FakeAgent(events, "learner"), algo, lags)
    seen = []
    try:
        for itr in range(3):
            batch = batches.begin(itr, 3)
            seen.append(batch.clone())
            algo.update_counter += 2  # the learner trains on the copy meanwhile
            assert batches.end(itr, 3) == [dict(Return=float(itr))]
    finally:
        batches.stop()
    assert [float(b[0]) for b in seen] == [0.0, 1.0, 2.0]
    assert events[:2] == [("sampling", "sample_mode", 0), ("obtain", 0)]  # the first batch
    assert events.index(("sampling", "sample_mode", 1)) < events.index(("obtain", 1))
    assert [e for e in events if e[0] == "publish"] == [("publish", 2), ("publish", 4),
                                                        ("publish", 6)]
    assert ("obtain", 3) not in events  # nothing after the last
    # Batch 1 was sampled with the initial parameters (before update 1 was published).
    assert lags == [(0, 0), (1, 2), (1, 2)]


def test_a_failed_background_batch_is_raised_in_the_learners_thread(monkeypatch):
    from rlfast.runners import overlap

    events = []
    monkeypatch.setattr(overlap, "publish_to", lambda learner, sampling: None)
    batches = overlap.OverlappedBatches(_FakeSampler(events, fail_at=1),
                                        _FakeAgent(events, "s"), _FakeAgent(events, "l"),
                                        _FakeAlgo(), [])
    try:
        batches.begin(0, 3)
        with pytest.raises(RuntimeError, match="planted at 1"):
            batches.end(0, 3)
    finally:
        batches.stop()
    assert not batches._thread._thread.is_alive()
