"""A step budget that ends before learning starts, and one rounded up to whole iterations.

``rlfast train`` warns, in one start-up line, about a run of a replay-based algorithm whose
``runner.n_steps`` ends before its first update (``algo.min_steps_learn``; for R2D1 also one
whole replayed sequence), and notes a budget rounded up to whole iterations. ``rlfast
tune`` prunes, before it trains, a trial that could not learn, so it is never the best
trial, and refuses a search in which no trial could. Everything but the two end-to-end
tests is checked on runs that are built, never started.
"""
import json

import optuna
import pytest

from rlfast.cli import _parser, main
from rlfast.experiments.assembly import configure_train, resolve_config
from rlfast.experiments.budget import (async_update_lag, first_learning_iteration,
                                       learning_budget_warning, step_rounding_note)
from rlfast.experiments.presets import build_experiment, get_preset
from rlfast.experiments.tune import prepare
from rlfast.experiments.tune_trials import trial_learning_problem

CHEAP = ["--device", "cpu", "--sampler", "serial", "--no-progress"]


def _configure(tmp_path, algo, env, *argv):
    args = _parser().parse_args(["train", algo, env, "--log-dir", str(tmp_path / "run"),
                                 *CHEAP, *argv])
    return configure_train(args)


def _warnings(run):
    return [n for n in run.notes if n.startswith("warning: ")]


# ---------------------------------------------------------------- rlfast train: the warning

@pytest.mark.parametrize("algo, env", [
    ("dqn", "CartPole-v1"), ("cat_dqn", "CartPole-v1"), ("rainbow", "CartPole-v1"),
    ("r2d1", "CartPole-v1"), ("ddpg", "Pendulum-v1"), ("td3", "Pendulum-v1"),
    ("sac", "Pendulum-v1")])
def test_every_replay_algorithm_warns_when_the_budget_ends_before_learning(tmp_path, algo, env):
    run = _configure(tmp_path, algo, env, "--steps", "500",
                     "--set", "algo.min_steps_learn=5000")
    [warning] = _warnings(run)
    assert warning.startswith(f"warning: --steps 500 ends before {algo} starts learning: ")
    assert "algo.min_steps_learn=5000" in warning and "no loss would be logged" in warning
    learns = _configure(tmp_path, algo, env, "--steps", "6000",
                        "--set", "algo.min_steps_learn=5000")
    assert _warnings(learns) == []


def test_the_issue_case_td3_pendulum_preset_with_4000_steps(tmp_path):
    run = _configure(tmp_path, "td3", "Pendulum-v1", "--steps", "4000")
    assert run.config["algo"]["min_steps_learn"] == 10_000  # the preset's
    assert _warnings(run) == [
        "warning: --steps 4000 ends before td3 starts learning: its first update comes after "
        "10001 steps (algo.min_steps_learn=10000), so no loss would be logged; train 10001 "
        "steps or more, or lower algo.min_steps_learn"]


def test_the_boundary_is_exact_in_whole_iterations(tmp_path):
    """DQN on CartPole: 4 x 8 = 32 steps per iteration; min_steps_learn 1000 is iteration
    31 (1000 // 32), whose batch ends at step 1024: 992 steps (31 iterations) do not
    reach it, 993 (rounded up to 32 iterations) do."""
    short = _configure(tmp_path, "dqn", "CartPole-v1", "--steps", "992",
                       "--set", "algo.min_steps_learn=1000")
    [warning] = _warnings(short)
    assert "first update comes after 1024 steps" in warning
    assert "train 993 steps or more" in warning
    assert _warnings(_configure(tmp_path, "dqn", "CartPole-v1", "--steps", "993",
                                "--set", "algo.min_steps_learn=1000")) == []


def test_r2d1_also_waits_for_one_whole_sequence(tmp_path):
    """min_steps_learn 0, but a replayed sequence needs warmup_T + batch_T + n_step_return +
    store_rnn_state_interval steps of each environment (10 + 20 + 3 + 20 = 53 in the
    CartPole preset): three iterations of 20 steps."""
    run = _configure(tmp_path, "r2d1", "CartPole-v1", "--steps", "300",
                     "--set", "algo.min_steps_learn=0")
    [warning] = _warnings(run)
    assert "R2D1 replays whole sequences" in warning and "shorten those sequences" in warning
    per_itr = run.config["sampler"]["batch_T"] * run.config["sampler"]["batch_B"]
    assert f"first update comes after {4 * per_itr} steps" in warning


@pytest.mark.parametrize("algo, env, sets", [
    ("dqn", "CartPole-v1", ["algo.min_steps_learn=100", "sampler.batch_B=3"]),
    ("r2d1", "CartPole-v1", ["algo.min_steps_learn=0", "sampler.batch_B=2"]),
    ("sac", "Pendulum-v1", ["algo.min_steps_learn=7", "sampler.batch_B=2",
                            "sampler.batch_T=3"]),
])
def test_the_predicted_first_update_is_the_algorithms_own(algo, env, sets):
    """What the check predicts before anything starts is the ``min_itr_learn`` that the
    algorithm's own ``initialize`` computes at start-up."""
    config = resolve_config(get_preset(algo, env), overrides=sets + [
        "algo.replay_size=1000", "sampler.eval_n_envs=0", "sampler.max_decorrelation_steps=0"])
    runner = build_experiment(algo, env, config, sampler="serial", device="cpu")
    predicted = first_learning_iteration(runner.algo, runner.sampler.batch_spec)
    assert predicted > 0
    try:
        runner.startup()
        assert runner.algo.min_itr_learn == predicted
    finally:
        runner.shutdown()


def test_ranks_and_the_asynchronous_runner_count_their_own_batches():
    """min_steps_learn 1000. One rank samples 32 steps per iteration: iteration 1000 // 32 =
    31 first updates, so 980 steps (31 iterations) fall short. Two synchronous ranks sample
    2 x 32: iteration 1000 // 64 = 15, which 980 steps (16 iterations) reach and 960 (15)
    do not. The asynchronous runner samples as one rank."""
    config = resolve_config(get_preset("dqn", "CartPole-v1"),
                            overrides=["algo.min_steps_learn=1000", "runner.n_steps=980"])
    runner = build_experiment("dqn", "CartPole-v1", config, sampler="serial", device="cpu")
    assert "first update comes after 1024 steps" in learning_budget_warning("dqn", runner)
    assert learning_budget_warning("dqn", runner, world_size=2) is None
    runner.n_steps = 960
    warning = learning_budget_warning("dqn", runner, world_size=2)
    assert warning.startswith("runner.n_steps=960 ends before dqn starts learning")
    assert "first update comes after 1024 steps" in warning
    config["runner"]["n_steps"] = 992
    runner = build_experiment("dqn", "CartPole-v1", config, sampler="serial", runner="async",
                              device="cpu")
    assert "first update comes after 1024 steps" in learning_budget_warning("dqn", runner)
    runner.n_steps = 993
    assert learning_budget_warning("dqn", runner, world_size=2) is None  # async: one sampler


@pytest.mark.parametrize("replay_ratio, batch_size, itr_steps", [
    (8, 128, 32), (1, 64, 32), (3, 64, 32), (0.5, 32, 10), (0.01, 256, 1)])
def test_the_asynchronous_lag_is_the_replay_pace_s_own(replay_ratio, batch_size, itr_steps):
    """The asynchronous optimizer's first call waits until its replay ratio allows the
    call's updates: the lag predicted is what ReplayPace itself lets through."""
    from types import SimpleNamespace

    from rlfast.runners.replay_pace import ReplayPace
    spec = SimpleNamespace(size=itr_steps, T=1)
    algo = SimpleNamespace(min_itr_learn=5, learn_after_itr=0, update_counter=0,
                           replay_ratio=replay_ratio, batch_size=batch_size,
                           updates_per_optimize=max(1, round(replay_ratio * itr_steps
                                                             / batch_size)))
    pace = ReplayPace(algo, itr_steps)
    while not pace.owes_updates():
        pace.copied += 1
    assert pace.copied - algo.min_itr_learn == async_update_lag(algo, spec, itr_steps)


def test_an_asynchronous_run_also_waits_for_its_replay_ratio():
    """replay_ratio 1 and batch_size 64 on 32-step iterations: each call makes one update,
    which the ratio allows only with two iterations in replay past iteration 31."""
    config = resolve_config(get_preset("dqn", "CartPole-v1"), overrides=[
        "algo.min_steps_learn=1000", "algo.replay_ratio=1", "algo.batch_size=64",
        "runner.n_steps=1024"])
    runner = build_experiment("dqn", "CartPole-v1", config, sampler="serial", runner="async",
                              device="cpu")
    warning = learning_budget_warning("dqn", runner)
    assert "first update comes after 1056 steps" in warning
    assert "waits 2 iterations for algo.replay_ratio=1" in warning
    runner.n_steps = 1025
    assert learning_budget_warning("dqn", runner) is None
    sync = build_experiment("dqn", "CartPole-v1", config, sampler="serial", device="cpu")
    assert learning_budget_warning("dqn", sync) is None  # the synchronous schedule: 1024


def test_on_policy_algorithms_learn_from_the_first_batch(tmp_path):
    assert _warnings(_configure(tmp_path, "ppo", "CartPole-v1", "--steps", "10")) == []
    assert _warnings(_configure(tmp_path, "a2c", "CartPole-v1", "--steps", "10")) == []


def test_a_run_that_cannot_learn_says_so_once_and_still_runs(tmp_path, capsys):
    """Warned, not refused: a run may be trained in sittings (train part, resume to the
    whole), so its first sitting may end before learning on purpose."""
    log_dir = tmp_path / "run"
    assert main(["train", "td3", "Pendulum-v1", "--steps", "20", "--log-dir", str(log_dir),
                 *CHEAP, "--set", "sampler.eval_n_envs=0",
                 "--set", "runner.log_interval_steps=10"]) == 0
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    assert "rlfast train td3 Pendulum-v1" in lines[0]
    warned = [line for line in lines if "ends before td3 starts learning" in line]
    assert len(warned) == 1 and warned[0] == lines[1]
    assert "warning: --steps 20 ends before td3 starts learning" in warned[0]
    assert captured.err == ""
    assert "ends before td3 starts learning" in (log_dir / "debug.log").read_text()


# ------------------------------------------------------------------ rlfast train: rounding

def test_a_budget_rounded_up_to_whole_iterations_is_noted_once(tmp_path):
    run = _configure(tmp_path, "dqn", "CartPole-v1", "--steps", "20001")
    assert run.notes == ["note: --steps 20001 is rounded up to 20032 steps: whole iterations "
                         "of 32 steps (sampler.batch_T=4 x sampler.batch_B=8)"]
    assert _configure(tmp_path, "dqn", "CartPole-v1", "--steps", "20000").notes == []


def test_rounding_names_the_config_key_when_the_flag_was_overridden(tmp_path):
    run = _configure(tmp_path, "dqn", "CartPole-v1", "--steps", "20000",
                     "--set", "runner.n_steps=1001")
    assert run.notes[1] == ("note: runner.n_steps=1001 is rounded up to 1024 steps: whole "
                            "iterations of 32 steps (sampler.batch_T=4 x sampler.batch_B=8)")
    config = resolve_config(get_preset("dqn", "CartPole-v1"), overrides=["runner.n_steps=100"])
    runner = build_experiment("dqn", "CartPole-v1", config, sampler="serial", device="cpu")
    assert step_rounding_note(runner, world_size=2) == (
        "runner.n_steps=100 is rounded up to 128 steps: whole iterations of 64 steps "
        "(sampler.batch_T=4 x sampler.batch_B=8 x 2 ranks)")


# ---------------------------------------------------------------------------- rlfast tune

def _tune_args(tmp_path, *argv):
    return _parser().parse_args(["tune", "sac", "Pendulum-v1", "--trials", "2",
                                 "--log-dir", str(tmp_path / "search"), "--device", "cpu",
                                 *argv])


def test_a_trial_drawing_a_start_past_its_budget_is_found_before_it_trains(tmp_path):
    """The issue's case: SAC drawing min_steps_learn 5000 on a 3000-step budget."""
    setup = prepare(_tune_args(tmp_path, "--steps", "3000"))
    problem = trial_learning_problem(setup, {"algo.min_steps_learn": 5000,
                                             "algo.batch_size": 64})
    assert problem.startswith("--steps 3000 ends before sac starts learning")
    assert "algo.min_steps_learn=5000" in problem
    assert trial_learning_problem(setup, {"algo.min_steps_learn": 1000}) is None


def test_a_search_in_which_no_trial_could_learn_is_refused(tmp_path, capsys):
    assert main(["tune", "sac", "Pendulum-v1", "--trials", "2", "--steps", "3000",
                 "--set", "algo.min_steps_learn=5000", "--device", "cpu",
                 "--log-dir", str(tmp_path / "search")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rlfast: error: no trial could learn: --steps 3000 ends before sac "
                          "starts learning") and err.count("\n") == 1
    assert not (tmp_path / "search").exists()


def test_tune_prunes_the_trial_that_cannot_learn_and_never_makes_it_best(tmp_path, capsys):
    """Two trials of 60 steps: the first (enqueued) draws min_steps_learn 100 and would
    finish with an untrained policy's returns; it is PRUNED before training (no child
    runs). The second learns from step 20 and is the best trial. (--steps 50, overridden
    by --set runner.n_steps=60, is said once at the start.)"""
    space = tmp_path / "space.json"
    space.write_text(json.dumps({"algo.min_steps_learn": [20, 100]}))
    enqueue = tmp_path / "enqueue.json"
    enqueue.write_text(json.dumps([{"algo.min_steps_learn": 100},
                                   {"algo.min_steps_learn": 20}]))
    log_dir = tmp_path / "search"
    code = main(["tune", "sac", "Pendulum-v1", "--trials", "2", "--parallel", "1",
                 "--steps", "50", "--search-space", str(space), "--enqueue", str(enqueue),
                 "--device", "cpu", "--log-dir", str(log_dir),
                 "--set", "algo.batch_size=16", "--set", "algo.replay_ratio=16",
                 "--set", "agent.model_kwargs.hidden_sizes=[16]",
                 "--set", "agent.q_model_kwargs.hidden_sizes=[16]",
                 "--set", "sampler.eval_n_envs=1", "--set", "sampler.eval_max_steps=200",
                 "--set", "sampler.eval_max_trajectories=1",
                 "--set", "runner.log_interval_steps=30", "--set", "runner.n_steps=60"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert out.count("note: --steps 50 is overridden by runner.n_steps=60 from --set") == 1
    study = optuna.load_study(study_name="rlfast-tune", storage=f"sqlite:///{log_dir}/study.db")
    trials = {t.number: t for t in study.get_trials(deepcopy=False)}
    assert trials[0].state.name == "PRUNED" and trials[0].params["algo.min_steps_learn"] == 100
    assert "ends before sac starts learning" in trials[0].user_attrs["unlearned"]
    assert not (log_dir / "trial_0").exists()  # never trained
    assert "[trial 0] PRUNED before training: --steps 60 ends before sac starts learning" in out
    assert trials[1].state.name == "COMPLETE" and study.best_trial.number == 1
    best = json.loads((log_dir / "best_config.json").read_text())
    assert best["algo"]["min_steps_learn"] == 20
