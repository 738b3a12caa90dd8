"""The command line: argument handling, outputs in --log-dir, errors."""
import csv
import json
import os
import subprocess
import sys

import pytest

from rlfast.cli import main

REQUIRED_COLUMNS = ["Diagnostics/Iteration", "Diagnostics/CumSteps", "Diagnostics/CumTime (s)",
                    "Diagnostics/StepsPerSecond", "Diagnostics/CumCompletedTrajs", "ReturnAverage",
                    "ReturnStd", "ReturnMedian", "ReturnMin", "ReturnMax", "LengthAverage"]


def _rows(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def test_train_writes_log_dir(tmp_path, capsys):
    log_dir = tmp_path / "run"
    code = main(["train", "ppo", "CartPole-v1", "--steps", "2048", "--sampler", "serial",
                 "--n-envs", "4", "--log-dir", str(log_dir), "--no-progress",
                 "--set", "sampler.batch_T=64", "--set", "runner.log_interval_steps=512",
                 "--set", "algo.learning_rate=0.002"])
    assert code == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-1].startswith("Final evaluation return: ")
    assert {p.name for p in log_dir.iterdir()} >= {"progress.csv", "debug.log", "params.json",
                                                   "params.pkl"}
    rows = _rows(log_dir / "progress.csv")
    for column in REQUIRED_COLUMNS:
        assert column in rows[0], column
    # itr 0 (pre-training eval) + one row per log interval (256 steps per itr, 2 itrs per log)
    assert [int(r["Diagnostics/CumSteps"]) for r in rows] == [0, 512, 1024, 1536, 2048]
    params = json.loads((log_dir / "params.json").read_text())
    assert params["config"]["algo"]["learning_rate"] == 0.002
    assert params["config"]["sampler"]["batch_T"] == 64
    assert params["config"]["sampler"]["batch_B"] == 4


def test_unknown_set_key_is_an_error(tmp_path, capsys):
    code = main(["train", "ppo", "CartPole-v1", "--log-dir", str(tmp_path / "x"),
                 "--set", "algo.no_such_key=1"])
    assert code == 2
    err = capsys.readouterr().err
    assert "algo.no_such_key" in err and "algo.learning_rate" in err
    assert not (tmp_path / "x").exists()


def test_unknown_algo_is_an_error(capsys):
    assert main(["train", "nope", "CartPole-v1"]) == 2
    assert "unknown algorithm" in capsys.readouterr().err


def test_default_log_dir_is_date_stamped_under_data(tmp_path, monkeypatch):
    monkeypatch.setenv("RLFAST_DATA_DIR", str(tmp_path))
    assert main(["train", "a2c", "CartPole-v1", "--steps", "320", "--sampler", "serial",
                 "--no-progress", "--set", "runner.log_interval_steps=160"]) == 0
    found = list(tmp_path.glob("local/*/*/a2c_CartPole-v1/run_0/progress.csv"))
    assert len(found) == 1


def test_python_dash_m_and_console_script_help():
    for cmd in ([sys.executable, "-m", "rlfast", "train", "--help"],):
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0
        assert "--sampler" in out.stdout and "--set" in out.stdout


def test_atari_with_gpu_sampler(tmp_path, capsys):
    log_dir = tmp_path / "pong"
    code = main(["train", "ppo", "atari:pong", "--sampler", "gpu", "--steps", "256",
                 "--n-envs", "2", "--log-dir", str(log_dir), "--no-progress",
                 "--set", "sampler.batch_T=64", "--set", "sampler.max_decorrelation_steps=10",
                 "--set", "sampler.eval_n_envs=2", "--set", "sampler.eval_max_steps=64",
                 "--set", "runner.log_interval_steps=128",
                 "--set", "agent.model_kwargs.fc_sizes=32"])
    assert code == 0
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith("Final evaluation return")
    rows = _rows(log_dir / "progress.csv")
    assert [int(r["Diagnostics/CumSteps"]) for r in rows] == [0, 128, 256]
    params = json.loads((log_dir / "params.json").read_text())
    assert params["config"]["env"]["frame_skip"] == 4


def test_unknown_atari_game_lists_close_matches(tmp_path, capsys):
    code = main(["train", "ppo", "atari:pongg", "--sampler", "serial", "--steps", "64",
                 "--log-dir", str(tmp_path / "x"), "--no-progress"])
    assert code == 2
    assert "pong" in capsys.readouterr().err


@pytest.mark.parametrize("algo", ["dqn", "cat_dqn", "rainbow", "r2d1"])
def test_value_based_presets_run(tmp_path, capsys, algo):
    log_dir = tmp_path / algo
    code = main(["train", algo, "CartPole-v1", "--steps", "1200", "--sampler", "serial",
                 "--log-dir", str(log_dir), "--no-progress",
                 "--set", "runner.log_interval_steps=600", "--set", "algo.min_steps_learn=300",
                 "--set", "sampler.eval_max_steps=400", "--set", "sampler.eval_n_envs=2"])
    assert code == 0
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith("Final evaluation return")
    rows = _rows(log_dir / "progress.csv")
    assert int(rows[-1]["Diagnostics/CumSteps"]) >= 1200
    assert float(rows[-1]["Diagnostics/CumUpdates"]) > 0  # it learned after min_steps_learn


def test_value_based_preset_rejects_continuous_actions(capsys):
    assert main(["train", "dqn", "Pendulum-v1", "--steps", "100"]) == 2
    assert "continuous" in capsys.readouterr().err


@pytest.mark.parametrize("algo", ["ddpg", "td3", "sac"])
def test_qpg_presets_run_serial_by_default(tmp_path, capsys, algo):
    log_dir = tmp_path / algo
    code = main(["train", algo, "Pendulum-v1", "--steps", "300", "--log-dir", str(log_dir),
                 "--no-progress", "--set", "algo.min_steps_learn=100",
                 "--set", "runner.log_interval_steps=150"])
    assert code == 0
    params = json.loads((log_dir / "params.json").read_text())
    assert params["sampler"] == "serial"
    assert params["config"]["env"]["final_observation"] is True
    rows = _rows(log_dir / "progress.csv")
    assert int(rows[-1]["Diagnostics/CumUpdates"]) == 300 - 100  # one update per step
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith("Final evaluation return")


def test_qpg_preset_rejects_discrete_actions(capsys):
    assert main(["train", "sac", "CartPole-v1"]) == 2
    assert "continuous" in capsys.readouterr().err


def test_affinity_code_pins_the_run(tmp_path):
    from rlfast.experiments.assembly import affinity_for_run
    assert affinity_for_run(None) is None
    slot1 = affinity_for_run("1slt_2cpu_0gpu_0hto")
    assert slot1["master_cpus"] == [1] and slot1["workers_cpus"] == [[1]]
    assert affinity_for_run("2cpu_0gpu_0hto")["master_cpus"] == [0]  # no slot token: slot 0
    # A multi-GPU code is a multi-rank (SyncRl) run; its GPUs must exist here.
    with pytest.raises(ValueError, match="cuda:0, cuda:1 .*do not exist"):
        affinity_for_run("0slt_8cpu_4gpu_2gpr_0hto_0saf")
    with pytest.raises(ValueError, match="needs --runner async"):
        affinity_for_run("0slt_2cpu_0gpu_2cpr_1res_1ass")
    with pytest.raises(ValueError, match="zzz"):
        affinity_for_run("2cpu_1zzz")
    log_dir = tmp_path / "pinned"
    assert main(["train", "ppo", "CartPole-v1", "--steps", "1024", "--sampler", "cpu",
                 "--n-envs", "2", "--affinity", "0slt_2cpu_0gpu_0hto", "--log-dir",
                 str(log_dir), "--no-progress", "--set", "sampler.batch_T=64"]) == 0
    assert json.loads((log_dir / "params.json").read_text())["affinity"] == "0slt_2cpu_0gpu_0hto"


def test_r2d1_with_alternating_sampler_runs(tmp_path, capsys):
    log_dir = tmp_path / "r2d1_alt"
    code = main(["train", "r2d1", "CartPole-v1", "--sampler", "alternating", "--steps", "960",
                 "--n-envs", "4", "--log-dir", str(log_dir), "--no-progress",
                 "--set", "runner.log_interval_steps=320", "--set", "algo.min_steps_learn=320",
                 "--set", "sampler.eval_max_steps=400", "--set", "sampler.eval_n_envs=2"])
    assert code == 0
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith("Final evaluation return")
    assert json.loads((log_dir / "params.json").read_text())["sampler"] == "alternating"
    rows = _rows(log_dir / "progress.csv")
    assert int(rows[-1]["Diagnostics/CumSteps"]) == 960  # 80 steps per itr, 12 itrs
    assert float(rows[-1]["Diagnostics/CumUpdates"]) > 0


def _internal_error(self, itr, samples=None, sampler_itr=None):
    raise ValueError(f"internal error in optimize_agent at itr {itr}")


def test_error_during_training_propagates(tmp_path, capsys, monkeypatch):
    from rlfast.algos import PPO
    monkeypatch.setattr(PPO, "optimize_agent", _internal_error)
    with pytest.raises(ValueError, match="internal error in optimize_agent at itr 0"):
        main(["train", "ppo", "CartPole-v1", "--steps", "512", "--sampler", "serial",
              "--log-dir", str(tmp_path / "x"), "--no-progress"])
    assert "rlfast: error" not in capsys.readouterr().err


# The CLI as a user runs it, with one internal error planted in the algorithm.
_PLANTED = """
import sys
from rlfast.algos import PPO
def optimize_agent(self, itr, samples=None, sampler_itr=None):
    raise ValueError("internal error in optimize_agent")
PPO.optimize_agent = optimize_agent
from rlfast.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_training_error_exits_with_traceback_config_error_is_short(tmp_path, capsys):
    train = ["train", "ppo", "CartPole-v1", "--steps", "512", "--sampler", "serial",
             "--no-progress"]
    # The training error in a real process: what the interpreter makes of the exception.
    done = subprocess.run([sys.executable, "-c", _PLANTED, *train,
                           "--log-dir", str(tmp_path / "a")],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode not in (0, 2)
    assert "Traceback (most recent call last)" in done.stderr
    assert "in optimize_agent" in done.stderr
    assert "ValueError: internal error in optimize_agent" in done.stderr
    assert "rlfast: error" not in done.stderr
    assert "Training complete." not in (tmp_path / "a" / "debug.log").read_text()

    # The configuration errors in this process: main() turns each into its one line and
    # status; python -m rlfast passes both on as they are, which a real process checks in
    # test_unknown_gymnasium_id_no_traceback_in_a_real_process.
    bads = (["--set", "algo.no_such_key=1"], ["--affinity", "2cpu_1zzz"],
            ["--set", "sampler.batch_T=many"])
    capsys.readouterr()
    for i, bad in enumerate(bads):
        status = main([*train, *bad, "--log-dir", str(tmp_path / f"b{i}")])
        stderr = capsys.readouterr().err
        assert status == 2, bad
        assert stderr.startswith("rlfast: error: "), stderr
        assert "Traceback" not in stderr
        assert not (tmp_path / f"b{i}").exists()


def test_unknown_gymnasium_id_is_a_one_line_error(tmp_path, capsys):
    assert main(["train", "ppo", "NoSuchEnv-v9", "--log-dir", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert err == ("rlfast: error: unknown gymnasium environment 'NoSuchEnv-v9'; "
                   "gymnasium.pprint_registry() lists the registered ids; "
                   "use atari:<game> for Atari; other env families: pz:<name>, popgym:<name>, "
                   "minatar:<name>\n")
    assert not (tmp_path / "x").exists()
    for typo, meant in (("CartPole-v9", "CartPole-v1"), ("cartpole-v1", "CartPole-v1"),
                        ("Pendulm-v1", "Pendulum-v1")):
        assert main(["train", "ppo", typo]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"rlfast: error: unknown gymnasium environment {typo!r}; "
                              f"did you mean {meant}"), err
        assert err.count("\n") == 1


def test_unknown_gymnasium_id_no_traceback_in_a_real_process(tmp_path):
    done = subprocess.run([sys.executable, "-m", "rlfast", "train", "ppo", "NoSuchEnv-v9"],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.startswith("rlfast: error: unknown gymnasium environment 'NoSuchEnv-v9'")
    assert "Traceback" not in done.stderr
    assert os.listdir(tmp_path) == []  # no data/ directory either


def test_check_env_id_accepts_what_gymnasium_make_accepts():
    from rlfast.experiments.assembly import check_env_id
    for env_id in ("CartPole-v1", "Pendulum", "gymnasium.envs:CartPole-v1", "atari:pong"):
        check_env_id(env_id)
    with pytest.raises(ValueError, match="importing 'no_such_module' failed"):
        check_env_id("no_such_module:Thing-v0")
