import copy
import json
import os

import pytest

from rlfast.utils.variant import (VariantLevel, load_variant, make_variants, save_variant,
                                  update_config)


def test_make_variants_two_levels_exact():
    lr = VariantLevel(keys=[("algo", "learning_rate")], values=[[1e-3], [3e-4]],
                      dir_names=["lr_1e-3", "lr_3e-4"])
    env = VariantLevel(keys=[("env", "id"), ("runner", "n_steps")],
                       values=[["CartPole-v1", 100], ["Acrobot-v1", 200], ["MountainCar-v0", 300]],
                       dir_names=["cartpole", "acrobot", "mountaincar"])
    variants, log_dirs = make_variants(lr, env)
    expected = []
    expected_dirs = []
    for lr_value, lr_dir in [(1e-3, "lr_1e-3"), (3e-4, "lr_3e-4")]:
        for env_id, steps, env_dir in [("CartPole-v1", 100, "cartpole"),
                                       ("Acrobot-v1", 200, "acrobot"),
                                       ("MountainCar-v0", 300, "mountaincar")]:
            expected.append({"algo": {"learning_rate": lr_value},
                             "env": {"id": env_id}, "runner": {"n_steps": steps}})
            expected_dirs.append(os.path.join(lr_dir, env_dir))
    assert variants == expected
    assert log_dirs == expected_dirs


def test_make_variants_three_levels_and_shared_subdicts():
    a = VariantLevel([("algo", "lr")], [[1], [2]], ["a1", "a2"])
    b = VariantLevel([("algo", "clip")], [[0.1], [0.2]], ["b1", "b2"])
    c = VariantLevel([("seed",)], [[7]], ["c"])
    variants, log_dirs = make_variants(a, b, c)
    assert variants == [
        {"algo": {"lr": 1, "clip": 0.1}, "seed": 7},
        {"algo": {"lr": 1, "clip": 0.2}, "seed": 7},
        {"algo": {"lr": 2, "clip": 0.1}, "seed": 7},
        {"algo": {"lr": 2, "clip": 0.2}, "seed": 7},
    ]
    assert log_dirs == [os.path.join("a1", "b1", "c"), os.path.join("a1", "b2", "c"),
                        os.path.join("a2", "b1", "c"), os.path.join("a2", "b2", "c")]
    # Variants are independent objects: changing one leaves the others alone.
    variants[0]["algo"]["lr"] = 99
    assert variants[1]["algo"]["lr"] == 1


def test_make_variants_values_are_copied():
    hidden = [64, 64]
    variants, _ = make_variants(VariantLevel([("model", "hidden")], [[hidden]], ["h"]),
                                VariantLevel([("x",)], [[1], [2]], ["x1", "x2"]))
    variants[0]["model"]["hidden"].append(1)
    assert hidden == [64, 64]
    assert variants[1]["model"]["hidden"] == [64, 64]


def test_variant_level_validation():
    with pytest.raises(ValueError, match="2 values entries and 1 dir_names"):
        VariantLevel([("a",)], [[1], [2]], ["only_one"])
    with pytest.raises(ValueError, match=r"values\[1\].*2 keys"):
        VariantLevel([("a",), ("b",)], [[1, 2], [3]], ["x", "y"])
    with pytest.raises(ValueError, match="unique"):
        VariantLevel([("a",)], [[1], [2]], ["same", "same"])
    with pytest.raises(ValueError, match="non-empty"):
        VariantLevel([()], [[1]], ["x"])
    with pytest.raises(TypeError, match="VariantLevel"):
        make_variants(([("a",)], [[1]], ["x"]))
    # A bare string key is a one-key path.
    assert VariantLevel(["lr"], [[1]], ["x"]).keys == [("lr",)]


def test_make_variants_conflicting_paths():
    with pytest.raises(ValueError, match="non-dict"):
        make_variants(VariantLevel([("a",)], [[1]], ["x"]),
                      VariantLevel([("a", "b")], [[2]], ["y"]))


def _default():
    return {"algo": {"learning_rate": 1e-3, "discount": 0.99,
                     "optim": {"eps": 1e-5, "betas": [0.9, 0.999]}},
            "runner": {"n_steps": 1000}, "name": "base"}


def test_update_config_deep_merge_without_mutation():
    default = _default()
    variant = {"algo": {"learning_rate": 3e-4, "optim": {"betas": [0.5, 0.6]}}, "name": "v"}
    default_before, variant_before = copy.deepcopy(default), copy.deepcopy(variant)
    merged = update_config(default, variant)
    assert merged == {"algo": {"learning_rate": 3e-4, "discount": 0.99,
                               "optim": {"eps": 1e-5, "betas": [0.5, 0.6]}},
                      "runner": {"n_steps": 1000}, "name": "v"}
    assert default == default_before
    assert variant == variant_before
    # The result shares no mutable structure with the inputs.
    merged["algo"]["optim"]["betas"].append(0)
    merged["runner"]["n_steps"] = 5
    assert default == default_before and variant == variant_before


def test_update_config_empty_variant_is_copy():
    default = _default()
    merged = update_config(default, {})
    assert merged == default and merged is not default
    merged["algo"]["discount"] = 0.5
    assert default["algo"]["discount"] == 0.99


def test_update_config_unknown_keys():
    with pytest.raises(KeyError) as info:
        update_config(_default(), {"algo": {"learnin_rate": 1.0}})
    message = str(info.value)
    assert "algo.learnin_rate" in message
    assert "learning_rate" in message and "discount" in message
    with pytest.raises(KeyError) as info:
        update_config(_default(), {"algo": {"optim": {"epz": 1}}})
    assert "algo.optim.epz" in str(info.value) and "betas" in str(info.value)
    with pytest.raises(KeyError) as info:
        update_config(_default(), {"runer": {"n_steps": 1}})
    assert "'runer'" in str(info.value) and "top level" in str(info.value)
    assert "runner" in str(info.value)
    assert info.value.args[0].startswith("Variant key 'runer' is not in the default config")


def test_update_config_dict_replaces_leaf():
    # A dict value for a key that is a leaf in the default replaces it whole.
    merged = update_config({"a": None, "b": 1}, {"a": {"x": 1}})
    assert merged == {"a": {"x": 1}, "b": 1}


def test_save_load_round_trip(tmp_path):
    variant = {"algo": {"learning_rate": 3e-4, "hidden": [64, 32]}, "flag": True, "n": None}
    log_dir = tmp_path / "new" / "dir"
    path = save_variant(variant, log_dir)
    assert path == os.path.join(str(log_dir), "variant.json")
    assert load_variant(log_dir) == variant
    with open(path) as f:
        assert json.load(f) == variant
    assert os.listdir(log_dir) == ["variant.json"]  # no temporary file left
    save_variant({"x": 1}, log_dir)  # overwrite
    assert load_variant(str(log_dir)) == {"x": 1}
    with pytest.raises(FileNotFoundError, match="variant.json"):
        load_variant(tmp_path)
