"""An unknown configuration key is a two-line error: the closest valid keys first, then every
valid key on one line (not one line per key)."""
from __future__ import annotations

import pytest

from rlfast.cli import main
from rlfast.experiments.config import ConfigError, apply_overrides, flatten, unknown_key_error
from rlfast.experiments.presets import get_preset

PRESET = get_preset("ppo", "CartPole-v1")
VALID = flatten(PRESET)


@pytest.mark.parametrize("key, meant", [
    ("algo.learnin_rate", ["algo.learning_rate"]),      # a typo
    ("sampler.learning_rate", ["algo.learning_rate"]),  # the wrong section
    ("learning_rate", ["algo.learning_rate"]),          # no section
    ("runner.nsteps", ["runner.n_steps"]),
    ("algo.epoch", ["algo.epochs"]),
    ("model.hidden_sizes", ["agent.model_kwargs.hidden_sizes"]),
    ("sampler.batch_b", ["sampler.batch_B", "sampler.batch_T"]),
], ids=["typo", "section", "no-section", "n_steps", "plural", "nested", "two"])
def test_first_line_names_the_closest_keys(key, meant):
    first, second = str(unknown_key_error(key, VALID)).split("\n")
    quoted = " or ".join(repr(k) for k in meant)
    assert first == f"unknown config key {key!r}; did you mean {quoted}?"
    assert second == "Valid keys: " + ", ".join(sorted(VALID))


def test_no_close_key_says_so():
    first, second = str(unknown_key_error("zzz", VALID)).split("\n")
    assert first == "unknown config key 'zzz'; no valid key is close to it."
    assert second.startswith("Valid keys: agent.") and "algo.learning_rate" in second


def test_at_most_three_suggestions():
    valid = {f"algo.rate_{c}": 0 for c in "abcdef"}
    first = str(unknown_key_error("algo.rate_", valid)).split("\n")[0]
    assert first.split("did you mean ")[1].count("'algo.rate_") == 3


def test_set_with_an_unknown_key_raises_the_short_error():
    with pytest.raises(ConfigError, match=r"did you mean 'algo\.gae_lambda'\?\nValid keys: "):
        apply_overrides(PRESET, ["algo.gae_lamda=0.9"])


def test_cli_prints_two_lines(tmp_path, capsys):
    log_dir = tmp_path / "x"
    assert main(["train", "ppo", "CartPole-v1", "--log-dir", str(log_dir),
                 "--set", "algo.learnin_rate=1e-3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2, err
    assert err[0] == ("rlfast: error: unknown config key 'algo.learnin_rate'; did you mean "
                      "'algo.learning_rate'?")
    assert err[1].startswith("Valid keys: ") and len(err[1].split(", ")) == len(VALID)
    assert not log_dir.exists()
