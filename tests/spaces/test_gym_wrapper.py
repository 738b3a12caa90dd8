"""Tests for GymSpaceWrapper: mapping of each gymnasium space, conversion both ways."""
import pickle

import numpy as np
import pytest
from gymnasium import spaces as gs

from rlfast.spaces import Composite, FloatBox, GymSpaceWrapper, IntBox


def test_discrete_with_start():
    wrapped = GymSpaceWrapper(gs.Discrete(4, start=2))
    assert isinstance(wrapped.space, IntBox)
    assert wrapped.shape == () and wrapped.n == 4
    assert (wrapped.low, wrapped.high) == (2, 6)
    draws = {int(wrapped.sample()) for _ in range(300)}
    assert draws == {2, 3, 4, 5}
    reverted = wrapped.revert(np.array(3, dtype=np.int64))
    assert reverted == 3 and type(reverted) is int
    assert type(wrapped.revert(np.array([5]))) is int
    assert wrapped.null_value() == 0  # the given null value (default 0), like rlpyt


def test_float_box_to_float32_and_kept():
    box = gs.Box(low=np.array([-1.0, -2.0]), high=np.array([1.0, 2.0]), dtype=np.float64)
    wrapped = GymSpaceWrapper(box)
    assert isinstance(wrapped.space, FloatBox)
    assert wrapped.dtype == np.float32 and wrapped.shape == (2,)
    np.testing.assert_array_equal(wrapped.low, [-1.0, -2.0])
    gym_value = np.array([0.5, -1.5])
    converted = wrapped.convert(gym_value)
    assert converted.dtype == np.float32
    assert wrapped.revert(converted).dtype == np.float64  # back to gym's dtype
    assert GymSpaceWrapper(box, force_float32=False).dtype == np.float64
    assert GymSpaceWrapper(gs.Box(-1.0, 1.0, (3,), np.float32)).dtype == np.float32


def test_uint8_image_box():
    box = gs.Box(0, 255, shape=(4, 5, 3), dtype=np.uint8)
    wrapped = GymSpaceWrapper(box)
    assert isinstance(wrapped.space, IntBox)
    assert wrapped.dtype == np.uint8 and wrapped.shape == (4, 5, 3)
    assert wrapped.n == 256
    sample = wrapped.sample()
    assert sample.dtype == np.uint8 and box.contains(sample)
    assert wrapped.null_value().dtype == np.uint8


def test_integer_box_with_per_dimension_bounds():
    box = gs.Box(low=np.array([0, -3]), high=np.array([2, 3]), dtype=np.int32)
    wrapped = GymSpaceWrapper(box)
    np.testing.assert_array_equal(wrapped.n, [3, 7])  # gym high inclusive, ours exclusive
    draws = np.stack([wrapped.sample() for _ in range(300)])
    assert draws.min(axis=0).tolist() == [0, -3] and draws.max(axis=0).tolist() == [2, 3]


def test_multidiscrete():
    md = gs.MultiDiscrete([3, 5, 2])
    wrapped = GymSpaceWrapper(md)
    assert isinstance(wrapped.space, IntBox)
    np.testing.assert_array_equal(wrapped.high, [3, 5, 2])
    np.testing.assert_array_equal(wrapped.n, [3, 5, 2])
    draws = np.stack([wrapped.sample() for _ in range(300)])
    assert draws.max(axis=0).tolist() == [2, 4, 1] and draws.min() == 0
    assert all(md.contains(wrapped.revert(d)) for d in draws[:20])


def nested_dict_space():
    return gs.Dict({
        "image": gs.Box(0, 255, (2, 2), np.uint8),
        "state": gs.Box(-1.0, 1.0, (3,), np.float64),
        "inner": gs.Dict({"mode": gs.Discrete(3), "flags": gs.MultiBinary(2)}),
    })


def test_nested_dict_to_composite_with_namedtuple_samples():
    gym_space = nested_dict_space()
    wrapped = GymSpaceWrapper(gym_space, name="obs")
    assert isinstance(wrapped.space, Composite)
    assert set(wrapped.names) == {"image", "state", "inner"}
    inner = wrapped.spaces[wrapped.names.index("inner")]
    assert isinstance(inner, Composite) and set(inner.names) == {"mode", "flags"}
    sample = wrapped.sample()
    assert sample.state.dtype == np.float32 and sample.image.dtype == np.uint8
    assert 0 <= int(sample.inner.mode) < 3
    assert wrapped.shape.state == (3,) and wrapped.shape.inner.flags == (2,)
    null = wrapped.null_value()
    assert np.all(null.image == 0) and null.inner.mode == 0
    back = pickle.loads(pickle.dumps(sample))  # NamedTupleSchema values pickle
    np.testing.assert_array_equal(back.inner.flags, sample.inner.flags)


def test_convert_revert_round_trip():
    gym_space = nested_dict_space()
    gym_space.seed(0)
    wrapped = GymSpaceWrapper(gym_space)
    gym_value = gym_space.sample()
    converted = wrapped.convert(gym_value)
    assert converted.state.dtype == np.float32
    np.testing.assert_array_equal(converted.image, gym_value["image"])
    assert int(converted.inner.mode) == int(gym_value["inner"]["mode"])
    reverted = wrapped.revert(converted)
    assert isinstance(reverted, dict) and isinstance(reverted["inner"], dict)
    assert set(reverted) == set(gym_value)
    np.testing.assert_allclose(reverted["state"], gym_value["state"], rtol=1e-6)
    assert gym_space.contains(reverted)
    # And the other way round, starting from an rlfast sample.
    sample = wrapped.sample()
    again = wrapped.convert(wrapped.revert(sample))
    np.testing.assert_array_equal(again.image, sample.image)
    np.testing.assert_array_equal(again.state, sample.state)
    np.testing.assert_array_equal(again.inner.flags, sample.inner.flags)


def test_reproducible_under_np_random_seed():
    wrapped = GymSpaceWrapper(nested_dict_space())
    np.random.seed(42)
    a = wrapped.sample()
    np.random.seed(42)
    b = wrapped.sample()
    np.testing.assert_array_equal(a.image, b.image)
    np.testing.assert_array_equal(a.state, b.state)
    assert a.inner.mode == b.inner.mode


def test_wrapper_pickles_and_still_converts():
    wrapped = pickle.loads(pickle.dumps(GymSpaceWrapper(nested_dict_space())))
    gym_value = nested_dict_space().sample()
    assert wrapped.convert(gym_value).state.dtype == np.float32
    assert isinstance(wrapped.revert(wrapped.sample()), dict)


def test_unsupported_space_type_error():
    with pytest.raises(TypeError, match=r"Tuple.*Discrete.*Box.*MultiDiscrete.*Dict"):
        GymSpaceWrapper(gs.Tuple([gs.Discrete(2), gs.Discrete(3)]))


def test_bad_dict_key():
    with pytest.raises(ValueError, match="bad key"):
        GymSpaceWrapper(gs.Dict({"bad key": gs.Discrete(2)}))


def test_multidiscrete_keeps_per_dimension_bounds_and_start():
    equal = GymSpaceWrapper(gs.MultiDiscrete([3, 3]), name="act")
    assert isinstance(equal.high, np.ndarray)  # not collapsed to a scalar: n is the nvec
    np.testing.assert_array_equal(equal.n, [3, 3])
    shifted = GymSpaceWrapper(gs.MultiDiscrete([2, 3], start=[1, -1]), name="act")
    np.testing.assert_array_equal(shifted.low, [1, -1])
    np.testing.assert_array_equal(shifted.high, [3, 2])
    np.testing.assert_array_equal(shifted.n, [2, 3])
    # The default null value 0 lies outside dimension 0's values {1, 2}: that one becomes 1.
    np.testing.assert_array_equal(shifted.null_value(), [1, 0])
    assert shifted.contains(shifted.null_value())
    draws = np.stack([shifted.sample() for _ in range(200)])
    assert draws.min(axis=0).tolist() == [1, -1] and draws.max(axis=0).tolist() == [2, 1]
    assert not shifted.contains(np.array([0, 0]))  # below dimension 0's start
    assert not shifted.contains(np.array([1, 2]))  # above dimension 1's last value


def test_flatten_dict_and_tuple_spaces():
    wrapped = GymSpaceWrapper(nested_dict_space(), flatten=True)
    assert isinstance(wrapped.space, FloatBox) and wrapped.dtype == np.float32
    # image 4, inner (flags 2, mode 3 one-hot), state 3: the Dicts sort their keys
    assert wrapped.shape == (12,)
    value = {"image": np.arange(4, dtype=np.uint8).reshape(2, 2), "state": np.array([.1, .2, .3]),
             "inner": {"mode": 2, "flags": np.array([1, 0], np.int8)}}
    flat = wrapped.convert(value)
    np.testing.assert_allclose(flat, [0, 1, 2, 3, 1, 0, 0, 0, 1, .1, .2, .3], rtol=1e-6)
    back = wrapped.revert(flat)
    assert back["inner"]["mode"] == 2 and back["image"].dtype == np.uint8
    pickled = pickle.loads(pickle.dumps(wrapped))
    np.testing.assert_array_equal(pickled.convert(value), flat)
    tuple_space = GymSpaceWrapper(gs.Tuple([gs.Discrete(2), gs.Discrete(3)]), flatten=True)
    np.testing.assert_array_equal(tuple_space.convert((1, 0)), [0, 1, 1, 0, 0])


def test_unsupported_space_error_names_flattening():
    with pytest.raises(TypeError, match="flatten=True"):
        GymSpaceWrapper(gs.Tuple([gs.Discrete(2), gs.Discrete(3)]))
