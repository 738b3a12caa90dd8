"""make_random_variants: random search variants shaped like make_variants's."""
import math

import numpy as np
import pytest

from rlfast.utils.variant import VariantLevel, make_random_variants, make_variants, update_config

SPACE = {
    "algo.learning_rate": ("loguniform", 1e-5, 1e-2),
    ("algo", "clip"): [0.1, 0.2, 0.3],
    "runner.n_envs": ("int", 1, 4),
    "model.hidden": ("intlog", 16, 256),
    "algo.entropy": ("uniform", -0.5, 0.5),
}


def test_same_seed_same_variants_other_seed_others():
    first = make_random_variants(SPACE, 20, seed=3)
    assert first == make_random_variants(SPACE, 20, seed=3)
    assert first[0] != make_random_variants(SPACE, 20, seed=4)[0]


def test_return_convention_and_log_dirs():
    variants, log_dirs = make_random_variants(SPACE, 12, seed=0)
    assert isinstance(variants, list) and isinstance(log_dirs, list)
    assert len(variants) == len(log_dirs) == 12
    assert len(set(log_dirs)) == 12
    assert [d[:3] for d in log_dirs] == [f"{i:02d}_" for i in range(12)]
    v, d = variants[0], log_dirs[0]
    assert d == (f"00_learning_rate_{v['algo']['learning_rate']:.3g}_clip_{v['algo']['clip']}"
                 f"_n_envs_{v['runner']['n_envs']}_hidden_{v['model']['hidden']}"
                 f"_entropy_{v['algo']['entropy']:.3g}")
    # one sample, no index padding; a list choice names its items
    _, (name,) = make_random_variants({"model.hidden_sizes": [[64, 64]]}, 1, seed=0)
    assert name == "0_hidden_sizes_64-64"


def test_nested_keys_match_make_variants():
    space = {("algo", "lr"): [0.1], "algo.clip": [0.2], "seed": [7], ("model", "sizes"): [[8]]}
    variants, _ = make_random_variants(space, 2, seed=0)
    level = VariantLevel([("algo", "lr"), ("algo", "clip"), ("seed",), ("model", "sizes")],
                         [[0.1, 0.2, 7, [8]]], ["x"])
    expected, _ = make_variants(level)
    assert variants == [expected[0], expected[0]]
    assert variants[0] == {"algo": {"lr": 0.1, "clip": 0.2}, "seed": 7, "model": {"sizes": [8]}}
    assert variants[0]["model"]["sizes"] is not variants[1]["model"]["sizes"]  # copies
    default = {"algo": {"lr": 1.0, "clip": 1.0, "gamma": 0.99}, "seed": 0, "model": {"sizes": []}}
    assert update_config(default, variants[0])["algo"] == {"lr": 0.1, "clip": 0.2, "gamma": 0.99}


def test_ranges_and_types_over_many_samples():
    variants, _ = make_random_variants(SPACE, 2000, seed=1)
    lr = np.array([v["algo"]["learning_rate"] for v in variants])
    clip = [v["algo"]["clip"] for v in variants]
    n_envs = np.array([v["runner"]["n_envs"] for v in variants])
    hidden = np.array([v["model"]["hidden"] for v in variants])
    entropy = np.array([v["algo"]["entropy"] for v in variants])
    assert lr.min() >= 1e-5 and lr.max() <= 1e-2
    assert set(clip) == {0.1, 0.2, 0.3}
    assert set(n_envs.tolist()) == {1, 2, 3, 4}  # both ends included
    assert hidden.min() == 16 and hidden.max() == 256  # both ends reached
    assert entropy.min() >= -0.5 and entropy.max() < 0.5 and abs(entropy.mean()) < 0.05
    assert all(type(v["runner"]["n_envs"]) is int and type(v["model"]["hidden"]) is int
               and type(v["algo"]["learning_rate"]) is float for v in variants)  # JSON-able


def test_loguniform_is_log_uniform():
    variants, _ = make_random_variants({"lr": ("loguniform", 1e-4, 1e-2)}, 4000, seed=2)
    lr = np.array([v["lr"] for v in variants])
    # log-uniform: median 1e-3 (the geometric midpoint); a plain uniform would give ~5e-3
    assert abs(math.log10(np.median(lr)) - (-3.0)) < 0.1
    # each decade holds half of the samples
    assert abs(np.mean(lr < 1e-3) - 0.5) < 0.05
    # intlog: the octaves [16, 32), [32, 64), [64, 128), [128, 256] are about equally likely
    variants, _ = make_random_variants({"h": ("intlog", 16, 255)}, 4000, seed=2)
    counts = np.histogram([v["h"] for v in variants], bins=[16, 32, 64, 128, 256])[0]
    assert np.all(np.abs(counts / 4000 - 0.25) < 0.04), counts


@pytest.mark.parametrize("space,n,message", [
    ({"algo.lr": ("normal", 0.0, 1.0)}, 2, r"'algo.lr' has spec \('normal'.*'uniform', "
                                           r"'loguniform', 'int', 'intlog'"),
    ({"lr": (0.1, 0.2)}, 2, r"'lr' has spec \(0.1, 0.2\); give a non-empty list"),
    ({"lr": []}, 2, r"'lr': the list of choices is empty"),
    ({"lr": ("uniform", 1.0, 1.0)}, 2, r"'lr': uniform needs low < high; got \('uniform', 1.0"),
    ({"lr": ("loguniform", 0.0, 1.0)}, 2, r"'lr': loguniform needs low > 0"),
    ({"h": ("intlog", 0, 8)}, 2, r"'h': intlog needs low > 0"),
    ({"h": ("int", 0.5, 8)}, 2, r"'h': int bounds must be finite integers"),
    ({"a.b": [1], ("a", "b"): [2]}, 2, r"overlap"),
    ({"a": [1], "a.b": [2]}, 2, r"overlap"),
    ({"a..b": [1]}, 2, r"key paths.*got 'a..b'"),
    ({}, 2, r"non-empty dict"),
    ({"a": [1]}, 0, r"n >= 1 \(an integer\); got 0"),
])
def test_errors_name_the_bad_value(space, n, message):
    with pytest.raises(ValueError, match=message):
        make_random_variants(space, n, seed=0)
