"""Preset overrides: dotted keys, type conversion, unknown keys listed."""
import pytest

from rlfast.experiments.config import ConfigError, apply_overrides, flatten
from rlfast.experiments.presets import get_preset

CONFIG = dict(algo=dict(learning_rate=1e-3, epochs=4, normalize=True, name="x", extra=None),
              agent=dict(model_kwargs=dict(hidden_sizes=[64, 64])))


def test_flatten_uses_dotted_keys():
    flat = flatten(CONFIG)
    assert flat["algo.learning_rate"] == 1e-3
    assert flat["agent.model_kwargs.hidden_sizes"] == [64, 64]


def test_values_take_the_default_type():
    out = apply_overrides(CONFIG, ["algo.learning_rate=3e-4", "algo.epochs=10",
                                   "algo.normalize=false", "algo.name=y",
                                   "agent.model_kwargs.hidden_sizes=[32, 16]", "algo.extra=5"])
    assert out["algo"]["learning_rate"] == pytest.approx(3e-4)
    assert isinstance(out["algo"]["epochs"], int) and out["algo"]["epochs"] == 10
    assert out["algo"]["normalize"] is False
    assert out["algo"]["name"] == "y"
    assert out["agent"]["model_kwargs"]["hidden_sizes"] == [32, 16]
    assert out["algo"]["extra"] == 5
    assert CONFIG["algo"]["epochs"] == 4  # the input is not modified


def test_unknown_key_lists_valid_keys():
    with pytest.raises(ConfigError) as e:
        apply_overrides(CONFIG, ["algo.learnin_rate=1"])
    assert "algo.learnin_rate" in str(e.value)
    assert "algo.learning_rate" in str(e.value) and "algo.epochs" in str(e.value)


@pytest.mark.parametrize("item", ["algo.epochs=2.5", "algo.epochs=abc", "algo.normalize=maybe",
                                  "agent.model_kwargs.hidden_sizes=7", "noequals"])
def test_bad_values_raise(item):
    with pytest.raises(ConfigError):
        apply_overrides(CONFIG, [item])


def test_preset_matches_action_space():
    cartpole = get_preset("ppo", "CartPole-v1")["agent"]["model_kwargs"]
    assert cartpole.get("normalize_observation") is None
    assert get_preset("ppo", "Pendulum-v1")["agent"]["model_kwargs"]["normalize_observation"]
    with pytest.raises(ValueError, match="unknown algorithm"):
        get_preset("nope", "CartPole-v1")
