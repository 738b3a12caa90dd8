import random

import numpy as np
import pytest
import torch

from rlfast.utils.seed import make_seed, set_seed


def _draw():
    return (random.random(), np.random.rand(3).tolist(), torch.rand(3).tolist())


def test_set_seed_makes_all_generators_repeat():
    set_seed(123)
    first = _draw()
    set_seed(123)
    assert _draw() == first
    set_seed(124)
    assert _draw() != first


def test_set_seed_matches_individual_seeding():
    set_seed(7)
    got = _draw()
    random.seed(7)
    np.random.seed(7)
    torch.manual_seed(7)
    assert got == _draw()


def test_set_seed_rejects_bad_values():
    with pytest.raises(TypeError, match="integer"):
        set_seed(1.5)
    with pytest.raises(ValueError, match="seed must be"):
        set_seed(-1)


def test_make_seed_range_and_spread():
    seeds = [make_seed() for _ in range(200)]
    assert all(isinstance(s, int) and 0 <= s <= 10000 for s in seeds)
    assert len(set(seeds)) > 150  # 200 draws from 10001 values rarely collide much
