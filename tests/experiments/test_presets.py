"""Presets and the experiment builder: merged tuning, agent choice per sampler and per action
space, flattened dict observations, early errors."""
import pytest

import tests.envs._space_envs  # noqa: F401  (registers the rlfast_test/ ids)
from rlfast.agents import (AlternatingRecurrentMultiCategoricalPgAgent, CategoricalPgAgent,
                           DqnAgent, MujocoFfAgent, MultiCategoricalPgAgent,
                           RecurrentMultiCategoricalPgAgent)
from rlfast.cli import main
from rlfast.experiments.placement import default_affinity
from rlfast.experiments.presets import PRESETS, build_experiment, env_kind, get_preset
from rlfast.utils.logging import logger_context
from rlfast.experiments.env_overrides import ENV_TUNED
from rlfast.utils.misc import available_cpus


def test_get_preset_merges_env_tuning_into_a_fresh_copy():
    sac = get_preset("sac", "Pendulum-v1")
    tuned = ENV_TUNED[("sac", "Pendulum-v1")]
    assert sac["algo"]["learning_rate"] == tuned["algo"]["learning_rate"]
    assert sac["algo"]["discount"] == PRESETS["sac"]["continuous"]["algo"]["discount"]
    assert sac["agent"]["model_kwargs"]["hidden_sizes"] == [64, 64]
    assert sac["runner"] == dict(tuned["runner"], stop_return=None, log_traj_window=100)
    sac["agent"]["model_kwargs"]["hidden_sizes"].append(1)
    sac["algo"]["discount"] = 0.5
    assert PRESETS["sac"]["continuous"]["agent"]["model_kwargs"]["hidden_sizes"] == [256, 256]
    assert tuned["agent"]["model_kwargs"]["hidden_sizes"] == [64, 64]
    assert get_preset("sac", "Pendulum-v1")["algo"]["discount"] == 0.99


def test_default_affinity_uses_available_cpus():
    cpus = available_cpus()
    assert default_affinity(4, "serial")["master_cpus"] == cpus
    alternating = default_affinity(1, "alternating")
    assert len(alternating["workers_cpus"]) == 2  # two groups take turns
    assert all(w[0] in cpus for w in alternating["workers_cpus"])


def test_r2d1_alternating_sampler_gets_the_alternating_agent():
    from rlfast.agents import AlternatingR2d1Agent, R2d1Agent
    config = get_preset("r2d1", "CartPole-v1")
    runner = build_experiment("r2d1", "CartPole-v1", config, sampler="alternating", seed=0)
    assert isinstance(runner.agent, AlternatingR2d1Agent)
    runner = build_experiment("r2d1", "CartPole-v1", config, sampler="gpu", seed=0)
    assert type(runner.agent) is R2d1Agent


def test_unknown_sampler_lists_choices():
    with pytest.raises(ValueError,
                       match="unknown sampler 'fast'.*'serial', 'cpu', 'gpu', 'alternating'"):
        build_experiment("ppo", "CartPole-v1", get_preset("ppo", "CartPole-v1"), sampler="fast")


def test_unknown_atari_game_fails_while_building():
    config = get_preset("ppo", "atari:pong")
    with pytest.raises(ValueError, match="pong"):
        build_experiment("ppo", "atari:pongg", config, sampler="serial", seed=0)


# ---- the agent for every action space, and clear errors for the rest -----------------------

MATCH = "rlfast_test/MatchTarget-v0"
DICT_OBS = "rlfast_test/DictObs-v0"


def test_action_kinds_match_the_space_exactly():
    assert env_kind("CartPole-v1") == "discrete"
    assert env_kind("Pendulum-v1") == "continuous"
    assert env_kind(MATCH) == "multi_discrete"  # was "continuous": a Gaussian agent
    assert env_kind("rlfast_test/MultiBinaryAct-v0") == "multi_discrete"
    assert env_kind("rlfast_test/DictAct-v0") is None
    assert env_kind("rlfast_test/MultiDiscrete2dAct-v0") is None
    assert env_kind("atari:pong") == "atari"


@pytest.mark.parametrize("algo", ["ppo", "a2c"])
def test_pg_presets_pick_the_multicategorical_agent(algo):
    config = get_preset(algo, MATCH)
    assert config["algo"] == get_preset(algo, "CartPole-v1")["algo"]  # the discrete family
    runner = build_experiment(algo, MATCH, config, sampler="serial", seed=0)
    assert type(runner.agent) is MultiCategoricalPgAgent
    config["agent"]["recurrent"] = True
    runner = build_experiment(algo, MATCH, config, sampler="serial", seed=0)
    assert type(runner.agent) is RecurrentMultiCategoricalPgAgent
    runner = build_experiment(algo, MATCH, config, sampler="alternating", seed=0)
    assert type(runner.agent) is AlternatingRecurrentMultiCategoricalPgAgent
    multibinary = "rlfast_test/MultiBinaryAct-v0"
    runner = build_experiment(algo, multibinary, get_preset(algo, multibinary), sampler="serial")
    assert type(runner.agent) is MultiCategoricalPgAgent


def test_known_spaces_keep_their_agents():
    assert type(build_experiment("ppo", "CartPole-v1", get_preset("ppo", "CartPole-v1"),
                                 sampler="serial").agent) is CategoricalPgAgent
    assert type(build_experiment("ppo", "Pendulum-v1", get_preset("ppo", "Pendulum-v1"),
                                 sampler="serial").agent) is MujocoFfAgent
    assert "env" not in get_preset("ppo", "CartPole-v1")  # no flattening for array observations


@pytest.mark.parametrize("algo", ["dqn", "cat_dqn", "rainbow", "r2d1", "ddpg", "td3", "sac"])
def test_value_and_qpg_presets_refuse_multidiscrete_naming_space_and_algorithms(algo):
    for env_id, space in [(MATCH, "MultiDiscrete([3 4 2])"),
                          ("rlfast_test/MultiBinaryAct-v0", "MultiBinary(3)")]:
        with pytest.raises(ValueError) as caught:
            get_preset(algo, env_id)
        message = str(caught.value)
        assert f"{algo!r} cannot act in the MultiDiscrete / MultiBinary action space {space} " \
            f"of {env_id} (it acts in " in message
        assert message.endswith("algorithms that can: a2c, ppo")
        with pytest.raises(ValueError, match="algorithms that can: a2c, ppo"):
            build_experiment(algo, env_id, get_preset("ppo", env_id), sampler="serial")


@pytest.mark.parametrize("algo", ["ppo", "dqn", "sac"])
def test_dict_and_2d_action_spaces_are_refused_by_every_preset(algo):
    with pytest.raises(ValueError, match=r"no rlfast algorithm can act in the action space "
                                         r"Dict\('force'.*'move': Discrete\(2\)\) of "
                                         r"rlfast_test/DictAct-v0; the presets support.*"
                                         r"MultiDiscrete / MultiBinary \(a2c, ppo\)"):
        get_preset(algo, "rlfast_test/DictAct-v0")
    with pytest.raises(ValueError, match=r"MultiDiscrete\(\[\[2 2\] \[3 3\]\]\)"):
        get_preset(algo, "rlfast_test/MultiDiscrete2dAct-v0")


def test_qpg_and_dqn_name_the_algorithms_for_the_other_spaces():
    with pytest.raises(ValueError, match=r"'sac' cannot act in the Discrete action space "
                                         r"Discrete\(2\) of CartPole-v1 \(it acts in continuous "
                                         r"Box action spaces\); algorithms that can: "
                                         r"a2c, cat_dqn, dqn, ppo, r2d1, rainbow"):
        get_preset("sac", "CartPole-v1")
    with pytest.raises(ValueError, match=r"'dqn' cannot act in the continuous Box action space "
                                         r".*Pendulum-v1 \(it acts in Atari \(discrete\), "
                                         r"Discrete action spaces\); algorithms that can: a2c, "
                                         r"ddpg, ppo, sac, td3"):
        get_preset("dqn", "Pendulum-v1")


def _short_run(algo, env_id, tmp_path):
    config = get_preset(algo, env_id)
    config["runner"].update(n_steps=512, log_interval_steps=256)
    config["sampler"].update(batch_T=32, batch_B=4, eval_n_envs=2, eval_max_steps=64,
                             eval_max_trajectories=2)
    if algo == "dqn":
        config["algo"].update(min_steps_learn=128, batch_size=32)
    runner = build_experiment(algo, env_id, config, sampler="serial", seed=0)
    with logger_context(str(tmp_path), 0, algo, {}, override_prefix=True):
        return runner, runner.train()


@pytest.mark.parametrize("algo,env_id", [("ppo", DICT_OBS), ("dqn", DICT_OBS),
                                         ("ppo", "rlfast_test/TupleObs-v0")])
def test_dict_and_tuple_observations_are_flattened_for_mlp_agents(algo, env_id, tmp_path):
    assert get_preset(algo, env_id)["env"]["flatten_observation"] is True
    runner, result = _short_run(algo, env_id, tmp_path)
    assert runner.sampler.env_kwargs["flatten_observation"] is True
    assert type(runner.agent) is (DqnAgent if algo == "dqn" else CategoricalPgAgent)
    assert runner.agent.env_model_kwargs["observation_shape"] == (5,)  # one-hot cue + position
    assert [steps for steps, _ in result["eval_returns"]] == [0, 256, 512]


def test_unflattened_dict_observation_is_a_clear_error_at_startup():
    config = get_preset("ppo", DICT_OBS)
    config["env"]["flatten_observation"] = False
    runner = build_experiment("ppo", DICT_OBS, config, sampler="serial", seed=0)
    with pytest.raises(TypeError, match=r"CategoricalPolicy needs an array observation space, got "
                                        r"GymSpaceWrapper\(Dict.*flatten_observation=True"):
        runner.agent.initialize(runner.sampler.EnvCls(**runner.sampler.env_kwargs).spaces)


def test_cli_trains_ppo_on_dict_observations(tmp_path, capsys):
    code = main(["train", "ppo", DICT_OBS, "--steps", "256", "--sampler", "serial",
                 "--n-envs", "2", "--log-dir", str(tmp_path / "run"), "--no-progress",
                 "--set", "sampler.batch_T=64", "--set", "runner.log_interval_steps=128",
                 "--set", "sampler.eval_max_steps=32"])
    assert code == 0, capsys.readouterr().err
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith("Final evaluation return")


def test_dqn_general_preset_is_the_zoo_classic_control_dqn_cartpole_keeps_its_tuning():
    from rlfast.experiments.env_overrides import DQN_CARTPOLE
    acrobot = get_preset("dqn", "Acrobot-v1")
    # rl-baselines3-zoo's Acrobot / LunarLander DQN in rlfast's units: one update of 128
    # samples per env step, target copy every 250 updates, one-step non-double targets.
    assert {k: acrobot["algo"][k] for k in ("learning_rate", "batch_size", "replay_size",
                                            "replay_ratio", "target_update_interval",
                                            "n_step_return", "double_dqn", "eps_steps")} == \
        dict(learning_rate=6.3e-4, batch_size=128, replay_size=50_000, replay_ratio=128,
             target_update_interval=250, n_step_return=1, double_dqn=False, eps_steps=12_000)
    assert acrobot["agent"]["eps_final"] == 0.1
    assert get_preset("dqn", "LunarLander-v3")["algo"] == acrobot["algo"]
    cartpole = get_preset("dqn", "CartPole-v1")
    for key, value in DQN_CARTPOLE["algo"].items():
        assert cartpole["algo"][key] == value, key
    assert cartpole["agent"]["eps_final"] == 0.01
    assert cartpole["agent"]["model_kwargs"]["hidden_sizes"] == [64, 64]
    assert cartpole["algo"]["n_step_return"] == 10 and cartpole["algo"]["replay_ratio"] == 8
    # The distributional presets keep the CartPole-tuned basis on every discrete task.
    for algo in ("cat_dqn", "rainbow"):
        assert get_preset(algo, "Acrobot-v1")["algo"]["batch_size"] == 64
        assert get_preset(algo, "Acrobot-v1")["algo"]["n_step_return"] in (3, 10)


@pytest.mark.parametrize("algo, env_id", [("ppo", "MountainCar-v0"), ("a2c", "MountainCar-v0"),
                                         ("ppo", "Acrobot-v1")])
def test_pg_presets_normalize_observation_and_reward_where_the_zoo_does(algo, env_id):
    config = get_preset(algo, env_id)
    assert config["agent"]["model_kwargs"]["normalize_observation"] is True
    assert config["algo"]["normalize_reward"] is True
    cartpole = get_preset(algo, "CartPole-v1")  # the zoo does not normalize there
    assert cartpole["algo"]["normalize_reward"] is False
    assert "normalize_observation" not in cartpole["agent"]["model_kwargs"]


@pytest.mark.parametrize("algo, env_id, budget", [
    ("ppo", "LunarLander-v3", 8 * 1000),     # 8 eval envs x the 1000-step time limit
    ("dqn", "LunarLander-v3", 8 * 1000),
    ("a2c", "BipedalWalker-v3", 8 * 1600),
    ("ppo", "CartPole-v1", 8 * 500),         # the preset's own budget already fits
    ("dqn", "MountainCar-v0", 8 * 500),      # never lowered below the preset's
    ("sac", "Pendulum-v1", 5 * 1000),
    ("ppo", "atari:pong", 40_000),           # no gymnasium time limit: the preset's
])
def test_evaluation_budget_lets_every_eval_env_finish_one_episode(algo, env_id, budget):
    assert get_preset(algo, env_id)["sampler"]["eval_max_steps"] == budget


def test_fit_evaluation_to_horizon_only_raises_and_reads_the_registry():
    from rlfast.envs.gym import gym_horizon
    from rlfast.experiments.presets import fit_evaluation_to_horizon
    assert gym_horizon("LunarLander-v3") == 1000 and gym_horizon("CartPole-v1") == 500
    assert gym_horizon("NoSuchEnv-v0") is None
    sampler = dict(eval_n_envs=4, eval_max_steps=100)
    fit_evaluation_to_horizon(sampler, 300)
    assert sampler["eval_max_steps"] == 1200
    fit_evaluation_to_horizon(sampler, 10)
    assert sampler["eval_max_steps"] == 1200
    fit_evaluation_to_horizon(sampler, None)
    assert sampler["eval_max_steps"] == 1200


def test_default_sampler_takes_the_per_environment_choice_first():
    from rlfast.experiments.env_overrides import ENV_SAMPLER
    from rlfast.experiments.catalog import sampler_names
    from rlfast.experiments.placement import default_sampler
    assert ENV_SAMPLER[("a2c", "MountainCar-v0")] == "serial"
    assert default_sampler("a2c", "MountainCar-v0") == "serial"
    assert default_sampler("a2c", "CartPole-v1") == "cpu"   # no entry: the algorithm's default
    assert default_sampler("ppo", "MountainCar-v0") == "cpu"
    assert default_sampler("sac", "Pendulum-v1") == default_sampler("sac") == "serial"
    assert default_sampler("a2c") == "cpu"
    assert all(kind in sampler_names() for kind in ENV_SAMPLER.values())


@pytest.mark.parametrize("extra, expected", [([], "serial"), (["--sampler", "cpu"], "cpu")])
def test_cli_uses_the_per_environment_sampler_unless_told(tmp_path, capsys, extra, expected):
    import json
    log_dir = tmp_path / "run"
    code = main(["train", "a2c", "MountainCar-v0", "--steps", "800", "--log-dir", str(log_dir),
                 "--no-progress", "--snapshot-mode", "none",
                 "--set", "runner.log_interval_steps=400", *extra])
    assert code == 0, capsys.readouterr().err
    assert json.loads((log_dir / "params.json").read_text())["sampler"] == expected


@pytest.mark.parametrize("runner_kind, extra, RunnerCls", [
    ("sync", [], "MinibatchRl"), ("sync", ["--world-size", "2"], "SyncRl"),
    ("async", [], "AsyncRl")])
def test_eval_n_envs_zero_builds_the_runner_that_logs_training_returns(runner_kind, extra,
                                                                        RunnerCls):
    config = get_preset("dqn", "CartPole-v1")
    config["sampler"]["eval_n_envs"] = 0
    world_size = 2 if extra else None
    runner = build_experiment("dqn", "CartPole-v1", config, sampler="serial", seed=0,
                              runner=runner_kind, world_size=world_size)
    assert type(runner).__name__ == RunnerCls
    assert runner.sampler.eval_n_envs == 0
    config["sampler"]["eval_n_envs"] = 2
    evaluating = build_experiment("dqn", "CartPole-v1", config, sampler="serial", seed=0,
                                  runner=runner_kind, world_size=world_size)
    assert type(evaluating).__name__ == RunnerCls + "Eval"


@pytest.mark.parametrize("value, message", [
    (-1, r"sampler\.eval_n_envs must be an int >= 0 .*got -1"),
    (1.5, r"sampler\.eval_n_envs must be an int >= 0 .*got 1\.5")])
def test_bad_eval_n_envs_is_a_one_line_error(value, message):
    config = get_preset("ppo", "CartPole-v1")
    config["sampler"]["eval_n_envs"] = value
    with pytest.raises(ValueError, match=message):
        build_experiment("ppo", "CartPole-v1", config, sampler="serial", seed=0)


def test_stop_return_without_evaluation_is_refused_before_the_run(tmp_path, capsys):
    code = main(["train", "ppo", "CartPole-v1", "--steps", "256", "--sampler", "serial",
                 "--log-dir", str(tmp_path / "run"), "--no-progress",
                 "--set", "sampler.eval_n_envs=0", "--set", "runner.stop_return=100"])
    assert code == 2
    err = capsys.readouterr().err
    assert "runner.stop_return stops at an evaluation return, but sampler.eval_n_envs=0" in err
    assert "Traceback" not in err and not (tmp_path / "run").exists()


def test_cli_trains_without_evaluation_and_logs_the_training_returns(tmp_path, capsys):
    code = main(["train", "ppo", "CartPole-v1", "--steps", "512", "--sampler", "serial",
                 "--n-envs", "2", "--log-dir", str(tmp_path / "run"), "--no-progress",
                 "--set", "sampler.batch_T=64", "--set", "runner.log_interval_steps=256",
                 "--set", "sampler.eval_n_envs=0"])
    out = capsys.readouterr().out.strip().splitlines()
    assert code == 0
    assert out[-1].startswith("Final training return (last 100 episodes at most): ")
    assert "no evaluation: sampler.eval_n_envs=0" in out[-1]
    import csv
    with open(tmp_path / "run" / "progress.csv") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["Diagnostics/CumSteps"]) for r in rows] == [256, 512]  # no evaluation row 0
    assert all(float(r["Diagnostics/EvalTime (s)"]) == 0.0 for r in rows)
    assert float(rows[-1]["ReturnAverage"]) > 0  # CartPole's training episodes, not NaN
    assert "Evaluating agent" not in (tmp_path / "run" / "debug.log").read_text()
