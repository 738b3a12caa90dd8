"""A named option (``--steps``, ``--n-envs``) that ``--config`` or ``--set`` overrides.

The merge order stays (preset, per-environment overrides, named options, ``--config``,
``--set``: later ones win), but ``rlfast train`` and ``rlfast tune`` say so in one line per
overridden option, naming the value that won and where it came from; nothing is said when
nothing is overridden. (``--seed`` is not a config key, so nothing can override it.)
"""
import json

import pytest

from rlfast.cli import _parser, main
from rlfast.experiments.assembly import configure_train, resolve_config, train_config
from rlfast.experiments.config import ConfigError
from rlfast.experiments.presets import get_preset
from rlfast.experiments.tune import prepare


def _write(tmp_path, data):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    return str(path)


def _notes(*argv):
    notes = []
    config = train_config(_parser().parse_args(["train", "ppo", "CartPole-v1", *argv]), notes)
    return config, notes


def test_config_file_overriding_steps_is_said_once(tmp_path):
    path = _write(tmp_path, {"runner": {"n_steps": 20480}})
    config, notes = _notes("--steps", "5000", "--config", path)
    assert config["runner"]["n_steps"] == 20480  # the merge order is unchanged
    assert notes == [f"note: --steps 5000 is overridden by runner.n_steps=20480 from "
                     f"--config {path}"]


def test_set_overriding_n_envs_is_said_once():
    config, notes = _notes("--n-envs", "4", "--set", "sampler.batch_B=8")
    assert config["sampler"]["batch_B"] == 8
    assert notes == ["note: --n-envs 4 is overridden by sampler.batch_B=8 from --set"]


def test_the_last_source_that_changed_it_is_named(tmp_path):
    path = _write(tmp_path, {"runner.n_steps": 20480, "sampler.batch_B": 2})
    config, notes = _notes("--steps", "5000", "--n-envs", "4", "--config", path,
                           "--set", "runner.n_steps=7000")
    assert notes == ["note: --steps 5000 is overridden by runner.n_steps=7000 from --set",
                     f"note: --n-envs 4 is overridden by sampler.batch_B=2 from --config "
                     f"{path}"]


@pytest.mark.parametrize("argv", [
    [],
    ["--steps", "5000", "--n-envs", "4"],
    ["--steps", "5000", "--set", "algo.learning_rate=0.001"],  # another key
    ["--steps", "5000", "--set", "runner.n_steps=5000"],  # the same value
    ["--set", "runner.n_steps=7000"],  # no --steps given
    ["--steps", "5000", "--set", "runner.n_steps=7000", "--set", "runner.n_steps=5000"],
], ids=["nothing", "flags-only", "other-key", "same-value", "no-flag", "set-back"])
def test_nothing_is_said_when_no_option_is_overridden(argv):
    assert _notes(*argv)[1] == []


def test_a_variant_is_named_by_its_source():
    notes = []
    config = resolve_config(get_preset("ppo", "CartPole-v1"), {"runner.n_steps": 5000},
                            config_values={"runner": {"n_steps": 9000}}, source="variant.json",
                            notes=notes)
    assert config["runner"]["n_steps"] == 9000
    assert notes == ["note: --steps 5000 is overridden by runner.n_steps=9000 from "
                     "variant.json"]
    # Without a notes list (rlfast resume, launch scripts) nothing is collected or printed.
    assert resolve_config(get_preset("ppo", "CartPole-v1"), {"runner.n_steps": 5000},
                          overrides=["runner.n_steps=9000"])["runner"]["n_steps"] == 9000


def test_seed_is_not_a_config_key():
    with pytest.raises(ConfigError, match="unknown config key 'seed'"):
        _notes("--seed", "3", "--set", "seed=4")


def test_train_prints_the_notice_once_after_its_first_line(tmp_path, capsys):
    path = _write(tmp_path, {"runner": {"n_steps": 256}})
    log_dir = tmp_path / "run"
    assert main(["train", "ppo", "CartPole-v1", "--steps", "5000", "--config", path,
                 "--sampler", "serial", "--device", "cpu", "--no-progress",
                 "--log-dir", str(log_dir), "--set", "sampler.batch_B=2",
                 "--set", "sampler.eval_n_envs=0"]) == 0
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    notice = f"note: --steps 5000 is overridden by runner.n_steps=256 from --config {path}"
    assert lines[1].endswith(f"| {notice}")
    assert sum(notice in line for line in lines) == 1 and captured.err == ""
    rows = (log_dir / "progress.csv").read_text().splitlines()
    assert rows[-1].split(",")[rows[0].split(",").index("Diagnostics/CumSteps")] == "256"


def test_train_says_nothing_when_nothing_is_overridden(tmp_path):
    args = _parser().parse_args(["train", "ppo", "CartPole-v1", "--steps", "2048",
                                 "--n-envs", "16", "--log-dir", str(tmp_path / "run"),
                                 "--device", "cpu", "--sampler", "serial"])
    assert configure_train(args).notes == []


def test_tune_says_it_once_at_the_start(tmp_path):
    args = _parser().parse_args(["tune", "ppo", "CartPole-v1", "--trials", "1", "--steps",
                                 "5000", "--set", "runner.n_steps=4096", "--device", "cpu",
                                 "--log-dir", str(tmp_path / "search")])
    setup = prepare(args)
    assert setup.steps == 4096
    assert setup.notes == ["note: --steps 5000 is overridden by runner.n_steps=4096 from --set"]
    args = _parser().parse_args(["tune", "ppo", "CartPole-v1", "--trials", "1",
                                 "--set", "runner.n_steps=4096", "--device", "cpu",
                                 "--log-dir", str(tmp_path / "other")])
    assert prepare(args).notes == []  # --steps not given: nothing was overridden
