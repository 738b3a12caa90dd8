"""The ES generation loop: fitness = mean return of each candidate's episodes on common seeds,
the same results with any number of workers, the RL runners' log columns, snapshots, stops."""
import csv
import io
import contextlib

import numpy as np
import pytest

from rlfast.es.policy import EsPolicy
from rlfast.experiments.presets import get_es_preset
from rlfast.experiments.es_train import build_es_runner
from rlfast.utils.logging import logger, logger_context
from rlfast.utils.logging.snapshot import load_snapshot
from tests.es._reference import reference_return
from tests.integration._guards import live_children

API_COLUMNS = ["Diagnostics/Iteration", "Diagnostics/CumSteps", "Diagnostics/CumTime (s)",
               "Diagnostics/StepsPerSecond", "Diagnostics/CumCompletedTrajs", "ReturnAverage",
               "ReturnStd", "ReturnMedian", "ReturnMin", "ReturnMax", "LengthAverage"]


def _runner(algo="cem", env="CartPole-v1", seed=0, workers=None, **runner_changes):
    config = get_es_preset(algo, env)
    config["runner"].update(runner_changes)
    affinity = None if workers is None else dict(workers_cpus=workers)
    return build_es_runner(algo, env, config, seed=seed, affinity=affinity)[0]


def _train(runner, log_dir=None):
    with contextlib.redirect_stdout(io.StringIO()):
        if log_dir is None:
            return runner.train()
        with logger_context(str(log_dir), 0, "es", dict(es=True), snapshot_mode="last",
                            override_prefix=True):
            return runner.train()


def test_fitness_is_the_mean_over_common_episode_seeds():
    runner = _runner("cmaes", "Pendulum-v1", seed=3, workers=[], n_generations=2)
    told = []
    tell = runner.strategy.tell
    runner.strategy.tell = lambda solutions, returns: (
        told.append((solutions.copy(), returns.copy())), tell(solutions, returns))
    runner.evaluator.initialize(runner.popsize + 1)
    try:
        for generation in range(2):
            runner.run_generation(generation)
    finally:
        runner.evaluator.shutdown()
    assert runner.episodes_per_candidate == 4  # the continuous CMA-ES preset
    policy = EsPolicy(**runner.snapshot_info["policy_kwargs"])
    for generation, (solutions, returns) in enumerate(told):
        seeds = runner.generation_seeds(generation)
        assert list(seeds) == list(range(4 + 4 * generation, 8 + 4 * generation))
        for k in (0, 5, 15):
            policy.load_vector(solutions[k].astype(np.float32))
            expected = np.mean([reference_return("Pendulum-v1", policy, s) for s in seeds])
            assert returns[k] == pytest.approx(expected, rel=1e-5)


def test_same_results_with_any_worker_count_and_seeded():
    results = {}
    for label, workers, seed in (("local", [], 1), ("two", [[0], [0]], 1), ("other", [], 2)):
        runner = _runner("openai_es", seed=seed, workers=workers, n_generations=4)
        result = _train(runner)
        results[label] = (result["eval_returns"], runner.strategy.result.center.copy())
    assert results["local"][0] == results["two"][0]
    np.testing.assert_array_equal(results["local"][1], results["two"][1])
    assert not np.array_equal(results["local"][1], results["other"][1])


def test_progress_columns_and_snapshot(tmp_path):
    before = set(live_children())
    runner = _runner("cmaes", seed=0, n_generations=4, log_interval_generations=2)
    result = _train(runner, tmp_path)
    assert set(live_children()) - before == set()
    with open(tmp_path / "progress.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 2 and result["n_itr"] == 4
    for column in API_COLUMNS + ["BestReturn", "Sigma", "Diagnostics/EvaluationsPerSecond",
                                 "Diagnostics/CumEvaluations", "PopulationReturnAverage",
                                 "PopulationReturnMax", "Diagnostics/TrainReturn"]:
        assert column in rows[0], column
    assert [int(r["Diagnostics/Iteration"]) for r in rows] == [1, 3]
    assert [int(r["Diagnostics/CumEvaluations"]) for r in rows] == [32, 64]
    assert int(rows[-1]["Diagnostics/CumSteps"]) == result["cum_steps"]
    assert float(rows[-1]["ReturnAverage"]) == pytest.approx(result["final_return"])
    assert float(rows[-1]["BestReturn"]) >= float(rows[-1]["PopulationReturnMax"])
    assert float(rows[-1]["Sigma"]) == pytest.approx(runner.strategy.sigma)
    snapshot = load_snapshot(str(tmp_path / "params.pkl"))
    assert snapshot["itr"] == 3 and snapshot["strategy"] == "CMAES"
    np.testing.assert_allclose(snapshot["center"], runner.strategy.result.center)
    assert snapshot["policy_kwargs"]["n_outputs"] == 2 and snapshot["env"] == "CartPole-v1"


def test_stops_on_step_budget_and_on_return():
    runner = _runner("cem", seed=0, n_generations=50, n_steps=3000)
    result = _train(runner)
    assert result["cum_steps"] >= 3000 and "n_steps=3000" in result["stop_reason"]
    assert result["cum_steps"] - 32 * 500 < 3000  # stopped at the first generation past it
    runner = _runner("cem", seed=0, n_generations=50, stop_return=100.0)
    result = _train(runner)
    assert result["final_return"] >= 100 and result["n_itr"] < 50
    assert "stop_return=100" in result["stop_reason"]


def test_bad_runner_settings():
    with pytest.raises(ValueError, match="episodes_per_candidate must be >= 1; got 0"):
        config = get_es_preset("cem", "CartPole-v1")
        config["evaluator"]["episodes_per_candidate"] = 0
        build_es_runner("cem", "CartPole-v1", config)
    with pytest.raises(ValueError, match="unknown evolution strategy 'ga'"):
        build_es_runner("ga", "CartPole-v1", get_es_preset("cem", "CartPole-v1"))
    with pytest.raises(ValueError, match="image game"):
        build_es_runner("cem", "atari:pong", get_es_preset("cem", "CartPole-v1"))
    logger.reset() if hasattr(logger, "reset") else None


def test_pinned_search_gives_the_caller_its_cores_and_threads_back():
    import psutil
    import torch
    threads, cores = torch.get_num_threads(), psutil.Process().cpu_affinity()
    torch.set_num_threads(2)
    try:
        runner = build_es_runner("cem", "CartPole-v1", get_es_preset("cem", "CartPole-v1"),
                                 affinity=dict(master_cpus=[0], workers_cpus=[[0]],
                                               master_torch_threads=1))[0]
        runner.n_generations = 1
        _train(runner)
        assert torch.get_num_threads() == 2
        assert psutil.Process().cpu_affinity() == cores
    finally:
        torch.set_num_threads(threads)
