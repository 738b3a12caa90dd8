"""``rlfast train --config FILE``: JSON preset overrides, nested, dotted or mixed, applied
after the preset and --steps / --n-envs and before --set, checked like --set."""
import json

import pytest

from rlfast.cli import _parser, main
from rlfast.experiments.assembly import train_config
from rlfast.experiments.config import (ConfigError, apply_config_values, load_config_file,
                                       nest)
from rlfast.experiments.presets import get_preset


def _write(tmp_path, data, name="config.json"):
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return str(path)


def _resolve(*argv):
    return train_config(_parser().parse_args(["train", "ppo", "CartPole-v1", *argv]))


@pytest.mark.parametrize("data", [
    {"algo": {"learning_rate": 0.001, "epochs": 7}, "sampler": {"batch_B": 8}},
    {"algo.learning_rate": 0.001, "algo.epochs": 7, "sampler.batch_B": 8},
    {"algo": {"learning_rate": 0.001}, "algo.epochs": 7, "sampler.batch_B": 8},
], ids=["nested", "flat", "mixed"])
def test_config_file_forms(tmp_path, data):
    config = _resolve("--config", _write(tmp_path, data))
    assert config["algo"]["learning_rate"] == 0.001
    assert config["algo"]["epochs"] == 7 and type(config["algo"]["epochs"]) is int
    assert config["sampler"]["batch_B"] == 8
    assert config["algo"]["discount"] == get_preset("ppo", "CartPole-v1")["algo"]["discount"]


def test_order_preset_options_file_set(tmp_path):
    path = _write(tmp_path, {"algo.learning_rate": 0.001, "runner.n_steps": 5000,
                             "agent": {"model_kwargs": {"hidden_sizes": [32]}}})
    config = _resolve("--steps", "999", "--n-envs", "3", "--config", path,
                      "--set", "algo.learning_rate=0.002")
    assert config["algo"]["learning_rate"] == 0.002  # --set wins over the file
    assert config["runner"]["n_steps"] == 5000  # the file wins over --steps
    assert config["sampler"]["batch_B"] == 3  # --n-envs where the file is silent
    assert config["agent"]["model_kwargs"]["hidden_sizes"] == [32]


def test_values_keep_json_types_and_convert_int_to_float(tmp_path):
    values = load_config_file(_write(tmp_path, {"algo": {"learning_rate": 1,
                                                         "normalize_advantage": False}}))
    assert values == {"algo.learning_rate": 1, "algo.normalize_advantage": False}
    config = apply_config_values(get_preset("ppo", "CartPole-v1"), values)
    assert config["algo"]["learning_rate"] == 1.0
    assert type(config["algo"]["learning_rate"]) is float
    assert config["algo"]["normalize_advantage"] is False
    for bad in ({"algo.epochs": "four"}, {"algo.epochs": 2.5}, {"algo.learning_rate": True},
                {"algo.normalize_advantage": 1}, {"agent.model_kwargs.hidden_sizes": 64}):
        with pytest.raises(ConfigError, match=list(bad)[0]):
            apply_config_values(get_preset("ppo", "CartPole-v1"), bad)


def test_nest_inverts_flat_keys():
    assert nest({"algo.lr": 1, "algo.x.y": 2, "runner.n": 3}) == {
        "algo": {"lr": 1, "x": {"y": 2}}, "runner": {"n": 3}}


@pytest.mark.parametrize("content, message", [
    ({"algo": {"learning_rat": 0.1}}, "unknown config key 'algo.learning_rat'"),
    ('{"algo": {"learning_rate": 0.1,}}', "not valid JSON"),
    ("[1, 2]", "expected a JSON object"),
    ({"algo": {"epochs": 3}, "algo.epochs": 4}, "algo.epochs is given twice"),
], ids=["unknown-key", "bad-json", "not-an-object", "duplicate"])
def test_config_errors_exit_2(tmp_path, capsys, content, message):
    path = _write(tmp_path, content)
    log_dir = tmp_path / "run"
    assert main(["train", "ppo", "CartPole-v1", "--config", path,
                 "--log-dir", str(log_dir)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rlfast: error: ") and message in err
    if "unknown" in message:
        assert "Valid keys:" in err and "algo.learning_rate" in err
    else:
        assert path in err
    assert not log_dir.exists()  # refused before anything was written


def test_missing_file_names_the_path(tmp_path, capsys):
    path = str(tmp_path / "nowhere.json")
    assert main(["train", "ppo", "CartPole-v1", "--config", path]) == 2
    err = capsys.readouterr().err
    assert path in err and "no such file" in err


def test_params_json_records_the_resolved_values_and_resume_keeps_them(tmp_path, capsys):
    path = _write(tmp_path, {"algo": {"learning_rate": 0.0123},
                             "sampler.batch_T": 32, "sampler.batch_B": 2})
    run_dir = tmp_path / "run"
    tiny = ["--sampler", "serial", "--no-progress", "--set", "sampler.eval_n_envs=1",
            "--set", "sampler.eval_max_trajectories=1", "--set", "sampler.eval_max_steps=100",
            "--set", "sampler.max_decorrelation_steps=0", "--set", "algo.epochs=1"]
    assert main(["train", "ppo", "CartPole-v1", "--steps", "128", "--config", path,
                 "--log-dir", str(run_dir), "--set", "algo.discount=0.9", *tiny]) == 0
    params = json.loads((run_dir / "params.json").read_text())
    assert params["config"]["algo"]["learning_rate"] == 0.0123
    assert params["config"]["algo"]["discount"] == 0.9
    assert params["config"]["sampler"]["batch_T"] == 32
    assert params["config"]["sampler"]["batch_B"] == 2
    # rlfast resume rebuilds from params.json, so the file's values survive without it.
    assert main(["resume", str(run_dir), "--steps", "256", "--no-progress"]) == 0
    params = json.loads((run_dir / "params.json").read_text())
    assert params["config"]["algo"]["learning_rate"] == 0.0123
    assert params["config"]["sampler"]["batch_T"] == 32
    capsys.readouterr()
