"""SyncRl / SyncRlEval with real ranks: ``world_size=2`` runs built by ``build_experiment``
fork both ranks from this process (serial sampler, CartPole-v1, a few iterations).

Checked: rank 0 alone writes the log, whose step counts cover both ranks and whose
completed-trajectory counts add both ranks' trajectories; a seed reproduces the run; both
ranks end with the same parameters; ``stop_return`` stops every rank; a replay-based run
updates on every rank, each with half the replay; a failing rank ends ``train`` with its
traceback and leaves no process or shared memory behind. Also the pure parts:
``rank_affinity`` and the constructor's checks.
"""
import math
import os
import threading

import numpy as np
import pytest

from rlfast.agents import CategoricalPgAgent
from rlfast.algos import PPO
from rlfast.envs import make
from rlfast.runners import RankFailedError, SyncRl, SyncRlEval
from rlfast.runners.sync_rl import rank_affinity
from rlfast.samplers import SerialSampler
from rlfast.utils.distributed import DistEnv
from rlfast.utils.logging import load_snapshot

from tests.integration import _guards
from tests.integration._guards import live_children, watchdog  # noqa: F401 - fixture
from tests.runners import _sync_runners as h

PPO_ITR_STEPS = 32 * 4 * 2  # batch_T * batch_B * ranks
DQN_ITR_STEPS = 4 * 4 * 2
RUN_LIMIT_S = 120  # hang guard of one run (each takes a few seconds)


@pytest.fixture(autouse=True)
def _no_launcher(monkeypatch):
    """No launcher variables from the environment this suite runs in: SyncRl must spawn."""
    for name in h.LAUNCHER_VARS:
        monkeypatch.delenv(name, raising=False)


class _Guard:
    """A hang guard for module-scoped fixtures (the ``watchdog`` fixture is per test)."""

    def __init__(self, seconds: float):
        self.timer = threading.Timer(seconds, _guards._abort, args=(seconds,))
        self.timer.daemon = True

    def __enter__(self):
        self.timer.start()

    def __exit__(self, *exc):
        self.timer.cancel()


def _column(rows, name):
    return [row[name] for row in rows]


# ---- PPO runs shared by several tests ------------------------------------------------------------
@pytest.fixture(scope="module")
def ppo_runs(tmp_path_factory):
    """Three PPO runs of 4 iterations (log every 2): "a" and "b" with seed 5, "c" with seed
    6; each run's log directory, records and result."""
    runs = {}
    environ = dict(os.environ)
    children_before = set(live_children())
    with pytest.MonkeyPatch.context() as mp, _Guard(3 * RUN_LIMIT_S):
        for name in h.LAUNCHER_VARS:
            mp.delenv(name, raising=False)
        for name, seed in (("a", 5), ("b", 5), ("c", 6)):
            root = tmp_path_factory.mktemp(f"ppo_{name}")
            config = h.small_config("ppo", n_steps=4 * PPO_ITR_STEPS,
                                    log_interval_steps=2 * PPO_ITR_STEPS)
            runner = h.build("ppo", config, seed=seed, record_dir=root)
            result = h.train(runner, root / "log")
            runs[name] = dict(root=root, log=root / "log", result=result,
                              rows=h.read_progress(root / "log" / "progress.csv"),
                              records=h.read_records(root))
    # The spawning process joined no process group: nothing was exported here.
    assert {k: v for k, v in os.environ.items() if k in h.LAUNCHER_VARS} == \
        {k: v for k, v in environ.items() if k in h.LAUNCHER_VARS}
    assert set(live_children()) <= children_before
    return runs


def test_rank_0_alone_writes_the_log_with_every_ranks_steps(ppo_runs):
    run = ppo_runs["a"]
    progress = [os.path.join(d, f) for d, _, files in os.walk(run["root"]) for f in files
                if f == "progress.csv"]
    assert progress == [str(run["log"] / "progress.csv")]
    rows = run["rows"]
    # One row per log: the evaluation before training, then iterations 1 and 3; a second
    # writer would repeat rows.
    assert _column(rows, "Diagnostics/Iteration") == [-1, 1, 3]
    assert _column(rows, "Diagnostics/CumSteps") == \
        [0] + [(itr + 1) * PPO_ITR_STEPS for itr in (1, 3)]
    assert run["result"]["cum_steps"] == 4 * PPO_ITR_STEPS
    assert [s for s, _ in run["result"]["eval_returns"]] == [0, 2 * PPO_ITR_STEPS,
                                                             4 * PPO_ITR_STEPS]
    with open(run["log"] / "debug.log") as f:
        log = f.read()
    assert log.count("Training complete.") == 1


def test_completed_trajectories_count_every_rank(ppo_runs):
    run = ppo_runs["a"]
    per_rank = [r["trajs"] for r in run["records"]]
    assert all(n > 0 for n in per_rank), per_rank
    assert run["rows"][-1]["Diagnostics/CumCompletedTrajs"] == sum(per_rank)
    # Updates: 4 iterations of 2 minibatches on every rank, in step.
    assert [r["update_counter"] for r in run["records"]] == [8, 8]
    assert run["rows"][-1]["Diagnostics/CumUpdates"] == 8


def test_same_seed_reproduces_the_run(ppo_runs):
    columns = ["Diagnostics/CumCompletedTrajs", "ReturnAverage", "ReturnMax", "lossAverage",
               "gradNormAverage", "entropyAverage"]

    def table(run):  # the first row (before training) has NaN losses: equal NaNs match
        return np.array([[row[c] for c in columns] for row in ppo_runs[run]["rows"]])

    assert table("a").shape == (3, len(columns))
    assert np.array_equal(table("a"), table("b"), equal_nan=True)
    assert not np.array_equal(table("a"), table("c"), equal_nan=True)
    final_a, final_b = (ppo_runs[r]["records"][0]["final"] for r in "ab")
    assert all(np.array_equal(final_a[k], final_b[k]) for k in final_a)


def test_ranks_end_with_identical_parameters(ppo_runs):
    run = ppo_runs["a"]
    rank0, rank1 = run["records"]
    assert (rank0["rank"], rank1["rank"]) == (0, 1) and rank0["pid"] != rank1["pid"]
    for which in ("initial", "final"):
        assert rank0[which].keys() == rank1[which].keys()
        for key in rank0[which]:
            assert np.array_equal(rank0[which][key], rank1[which][key]), (which, key)
    moved = max(float(np.abs(rank0["final"][k] - rank0["initial"][k]).max())
                for k in rank0["final"])
    assert moved > 1e-3  # training changed them
    # ... and they are what rank 0's final snapshot holds.
    snapshot = load_snapshot(run["log"] / "params.pkl")
    assert snapshot["itr"] == 3
    saved = h.numpy_state(snapshot["agent_state_dict"])
    assert saved.keys() == rank0["final"].keys()
    assert all(np.array_equal(saved[k], rank0["final"][k]) for k in saved)


# ---- early stop ----------------------------------------------------------------------------------
def test_stop_return_stops_every_rank(tmp_path, watchdog):  # noqa: F811
    watchdog(RUN_LIMIT_S)
    children_before = set(live_children())
    config = h.small_config("ppo", n_steps=50 * PPO_ITR_STEPS, log_interval_steps=PPO_ITR_STEPS,
                            stop_return=0.0)
    runner = h.build("ppo", config, seed=2, record_dir=tmp_path)
    result = h.train(runner, tmp_path / "log")
    assert result["cum_steps"] == PPO_ITR_STEPS  # stopped at the first evaluation
    assert [r["itrs_done"] for r in h.read_records(tmp_path)] == [1, 1]
    rows = h.read_progress(tmp_path / "log" / "progress.csv")
    assert _column(rows, "Diagnostics/Iteration") == [-1, 0]
    assert set(live_children()) <= children_before


# ---- replay --------------------------------------------------------------------------------------
def test_dqn_run_updates_on_every_rank_with_half_the_replay(tmp_path, watchdog):  # noqa: F811
    """4 envs x 4 steps per rank: 32 steps per iteration globally. Learning starts after 64
    steps (iteration 2) and runs 8 * 32 / 16 = 16 updates per iteration: 8 x 16 = 128."""
    watchdog(RUN_LIMIT_S)
    children_before = set(live_children())
    config = h.small_config("dqn", n_steps=10 * DQN_ITR_STEPS,
                            log_interval_steps=5 * DQN_ITR_STEPS)
    runner = h.build("dqn", config, seed=4, record_dir=tmp_path)
    h.train(runner, tmp_path / "log")
    rows = h.read_progress(tmp_path / "log" / "progress.csv")
    assert _column(rows, "Diagnostics/CumSteps") == [0, 5 * DQN_ITR_STEPS, 10 * DQN_ITR_STEPS]
    assert rows[-1]["Diagnostics/CumUpdates"] == 128
    records = h.read_records(tmp_path)
    for record in records:
        assert record["update_counter"] == 128
        assert record["updates_per_optimize"] == 16 and record["min_itr_learn"] == 2
        assert record["replay_batch_size"] == 8  # half of batch_size 16
        assert record["rank_replay_size"] == 500 and record["replay_capacity"] == 500
    assert rows[-1]["Diagnostics/CumCompletedTrajs"] == sum(r["trajs"] for r in records)
    final0, final1 = (r["final"] for r in records)
    assert final0.keys() == final1.keys()
    assert all(np.array_equal(final0[k], final1[k]) for k in final0)  # targets included
    assert any(k.startswith("target.") for k in final0)
    assert set(live_children()) <= children_before


# ---- a failing rank ------------------------------------------------------------------------------
@pytest.mark.parametrize("fail_at,sampler", [("log_and_snapshot", "cpu"), ("startup", "serial")])
def test_failing_rank_raises_its_traceback_and_leaves_nothing(tmp_path, watchdog, fail_at,  # noqa: F811
                                                              sampler):
    """Rank 1 raises (after its first iteration, with sampler worker processes; or before
    the rendezvous, which rank 0 is then left waiting at): ``train`` raises RankFailedError
    with rank 1's traceback, and no process or /dev/shm entry of the run survives."""
    watchdog(RUN_LIMIT_S)
    children_before = set(live_children())
    shm_before = h.shm_entries()
    config = h.small_config("ppo", n_steps=8 * PPO_ITR_STEPS, log_interval_steps=PPO_ITR_STEPS)
    runner = h.build("ppo", config, seed=1, sampler=sampler, fail_rank=1, fail_at=fail_at)
    with pytest.raises(RankFailedError) as info:
        h.train(runner, tmp_path / "log")
    message = str(info.value)
    assert "Rank 1" in message
    assert "Traceback (most recent call last)" in message
    assert h.FAIL_MESSAGE in message
    assert f"in {fail_at}" in message  # the frame that raised
    assert set(live_children()) <= children_before
    assert h.new_shm_entries(shm_before) == []


# ---- rank_affinity -------------------------------------------------------------------------------
def _env(local_rank, local_world_size=2, launcher="spawn"):
    return DistEnv(rank=local_rank, local_rank=local_rank, world_size=local_world_size,
                   local_world_size=local_world_size, master_addr="127.0.0.1",
                   master_port=29500, launcher=launcher)


def test_rank_affinity_list_picks_the_local_ranks_entry():
    affinity = [dict(master_cpus=[0], cuda_idx=None), dict(master_cpus=[1], cuda_idx=None)]
    assert rank_affinity(affinity, _env(0)) == affinity[0]
    assert rank_affinity(affinity, _env(1)) == affinity[1]
    assert rank_affinity(affinity, _env(1)) is not affinity[1]  # a copy
    with pytest.raises(ValueError, match="lists 2 ranks but this is local rank 2"):
        rank_affinity(affinity, _env(2, local_world_size=3))


def test_rank_affinity_splits_one_dict_over_the_local_ranks():
    affinity = dict(master_cpus=[0, 1, 2, 3], master_torch_threads=1,
                    workers_cpus=[[0], [1], [2], [3]], worker_torch_threads=1, cuda_idx=None)
    original = {k: (list(v) if isinstance(v, list) else v) for k, v in affinity.items()}
    mine0, mine1 = rank_affinity(affinity, _env(0)), rank_affinity(affinity, _env(1))
    assert mine0["workers_cpus"] == [[0], [2]] and mine0["master_cpus"] == [0, 2]
    assert mine1["workers_cpus"] == [[1], [3]] and mine1["master_cpus"] == [1, 3]
    assert mine0["master_torch_threads"] == mine1["master_torch_threads"] == 1
    assert mine0["cuda_idx"] is None and mine1["cuda_idx"] is None
    assert affinity == original  # the shared dict is left alone
    # Fewer workers than ranks: every rank still gets one.
    single = dict(master_cpus=[0], workers_cpus=[[0]])
    assert rank_affinity(single, _env(1))["workers_cpus"] == [[0]]
    # No workers (serial sampler): the master cores are split.
    serial = dict(master_cpus=[0, 1, 2, 3])
    assert rank_affinity(serial, _env(0))["master_cpus"] == [0, 2]
    assert rank_affinity(serial, _env(1))["master_cpus"] == [1, 3]
    # One local rank, or Slurm (which already bound each task to its cores): not split.
    assert rank_affinity(affinity, _env(0, local_world_size=1))["workers_cpus"] == \
        affinity["workers_cpus"]
    assert rank_affinity(affinity, _env(1, launcher="slurm"))["master_cpus"] == [0, 1, 2, 3]


def test_rank_affinity_maps_cuda_idx_to_the_local_rank():
    affinity = dict(master_cpus=[0, 1], cuda_idx=0)
    assert [rank_affinity(affinity, _env(r, 4), n_gpus=4)["cuda_idx"] for r in range(4)] == \
        [0, 1, 2, 3]
    assert [rank_affinity(affinity, _env(r, 4), n_gpus=2)["cuda_idx"] for r in range(4)] == \
        [0, 1, 0, 1]
    assert rank_affinity(dict(cuda_idx=None), _env(1), n_gpus=2)["cuda_idx"] is None
    assert rank_affinity(None, _env(1)) == {}


def test_rank_affinity_refuses_an_async_affinity():
    async_affinity = dict(optimizer=[dict(cuda_idx=None)], sampler=dict(master_cpus=[0]))
    with pytest.raises(ValueError, match="async affinity"):
        rank_affinity(async_affinity, _env(0))


# ---- constructor ---------------------------------------------------------------------------------
def _parts():
    sampler = SerialSampler(EnvCls=make, env_kwargs=dict(id="CartPole-v1"), batch_T=4,
                            batch_B=2, max_decorrelation_steps=0)
    return dict(algo=PPO(), agent=CategoricalPgAgent(model_kwargs=dict(hidden_sizes=[4])),
                sampler=sampler, n_steps=64)


@pytest.mark.parametrize("Runner", [SyncRl, SyncRlEval])
@pytest.mark.parametrize("kwargs,error,match", [
    (dict(world_size=0), ValueError, "world_size"),
    (dict(world_size=-2), ValueError, "world_size"),
    (dict(world_size=1.5), TypeError, "world_size"),
    (dict(world_size=True), TypeError, "world_size"),
    (dict(backend="mpi"), ValueError, "backend must be one of gloo, nccl"),
    (dict(backend="GLOO"), ValueError, "backend"),
    (dict(dist_timeout=0), ValueError, "dist_timeout must be a finite number of seconds > 0"),
    (dict(dist_timeout=-5.0), ValueError, "dist_timeout must be a finite number of seconds > 0"),
    (dict(dist_timeout=math.nan), ValueError,
     "dist_timeout must be a finite number of seconds > 0"),
    (dict(dist_timeout=math.inf), ValueError,
     "dist_timeout must be a finite number of seconds > 0"),
])
def test_constructor_refuses_bad_settings(Runner, kwargs, error, match):
    with pytest.raises(error, match=match) as info:
        Runner(**_parts(), **kwargs)
    assert Runner.__name__ in str(info.value)


def test_constructor_defaults():
    runner = SyncRlEval(**_parts())
    assert runner.requested_world_size == 1 and runner.backend is None
    runner = SyncRlEval(**_parts(), affinity=[dict(master_cpus=[0]), dict(master_cpus=[1]),
                                              dict(master_cpus=[0])])
    assert runner.requested_world_size == 3  # one rank per affinity entry
    runner = SyncRl(**_parts(), world_size=2, backend="gloo", dist_timeout=7)
    assert (runner.requested_world_size, runner.backend, runner.dist_timeout) == (2, "gloo", 7.0)
