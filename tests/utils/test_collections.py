import copy
import multiprocessing as mp
import os
import pickle
import sys
from collections import namedtuple

import numpy as np
import pytest
import torch

from rlfast.utils.collections import (
    AttrDict, NamedArrayTuple, NamedArrayTupleSchema, NamedArrayTupleSchema_like, NamedTuple,
    NamedTupleSchema, is_namedarraytuple, is_namedarraytuple_class, is_namedtuple,
    is_namedtuple_class, namedarraytuple, namedarraytuple_like)

_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
import _spawn_helpers  # noqa: E402

# Module-level types, so pickle can find them by reference.
Points = namedarraytuple("Points", ["x", "y"])
Inner = namedarraytuple("Inner", ["a", "b"])
Outer = namedarraytuple("Outer", ["obs", "inner", "extra"])
PlainNt = namedtuple("PlainNt", ["p", "q"])
Pair_nt, Pair_nat = namedarraytuple("Pair", ["u", "v"], return_namedtuple_cls=True,
                                    classname_suffix=True)


def make_outer(T=4, B=3):
    return Outer(
        obs=np.arange(T * B * 2, dtype=np.float32).reshape(T, B, 2),
        inner=Inner(a=torch.arange(T * B).reshape(T, B), b=np.ones((T, B), dtype=np.int64)),
        extra=None,
    )


# ---------------------------------------------------------------- classic namedarraytuple

def test_doc_example_reads_and_writes():
    p = Points(np.array([0, 1]), y=np.array([10, 11]))
    assert np.array_equal(p.x, [0, 1])
    row = p[0]
    assert type(row) is Points and row.x == 0 and row.y == 10
    assert np.array_equal(p.get(0), [0, 1])
    x, y = p
    assert x is p.x and y is p.y
    p[1] = 2
    assert p.x.tolist() == [0, 2] and p.y.tolist() == [10, 2]
    p[1] = Points(3, 30)
    assert p.x.tolist() == [0, 3] and p.y.tolist() == [10, 30]
    assert "x" in p and "z" not in p
    assert list(p.items()) == [("x", p.x), ("y", p.y)]


@pytest.mark.parametrize("loc", [2, slice(1, 3), (slice(None), 1), np.array([0, 3]),
                                 (1, slice(0, 2)), Ellipsis])
def test_getitem_matches_per_field_indexing_with_nesting_and_torch(loc):
    nat = make_outer()
    out = nat[loc]
    assert type(out) is Outer and type(out.inner) is Inner
    torch_loc = torch.as_tensor(loc) if isinstance(loc, np.ndarray) else loc
    np.testing.assert_array_equal(out.obs, nat.obs[loc])
    assert torch.equal(out.inner.a, nat.inner.a[torch_loc])
    np.testing.assert_array_equal(out.inner.b, nat.inner.b[loc])
    assert out.extra is None


def test_slice_read_is_a_view_on_the_fields():
    nat = make_outer()
    view = nat[1:3]
    view.obs[0, 0, 0] = -5.0
    view.inner.a[0, 0] = -7
    assert nat.obs[1, 0, 0] == -5.0 and nat.inner.a[1, 0] == -7


def test_setitem_broadcast_and_fieldwise_with_nesting():
    nat = make_outer()
    original = copy.deepcopy(nat)
    nat[2] = 0  # broadcast into every non-None field, nested included
    assert np.all(nat.obs[2] == 0) and torch.all(nat.inner.a[2] == 0)
    assert np.all(nat.inner.b[2] == 0) and nat.extra is None
    np.testing.assert_array_equal(nat.obs[:2], original.obs[:2])
    np.testing.assert_array_equal(nat.inner.b[3], original.inner.b[3])

    value = Outer(obs=np.full((3, 2), 9.0), inner=Inner(a=torch.tensor([1, 2, 3]), b=7),
                  extra=None)
    nat[0] = value
    np.testing.assert_array_equal(nat.obs[0], np.full((3, 2), 9.0))
    assert nat.inner.a[0].tolist() == [1, 2, 3] and nat.inner.b[0].tolist() == [7, 7, 7]

    nat[1:3, 1] = nat[0, 0]  # slice/tuple locations with a same-type value
    np.testing.assert_array_equal(nat.obs[1:3, 1], [[9.0, 9.0], [9.0, 9.0]])
    assert nat.inner.a[1:3, 1].tolist() == [1, 1]


def test_setitem_accepts_schema_value_with_same_fields():
    p = Points(np.zeros(3), np.zeros(3))
    p[1] = NamedArrayTupleSchema("Points", ["x", "y"])(4.0, 5.0)
    assert p.x.tolist() == [0, 4, 0] and p.y.tolist() == [0, 5, 0]


def test_setitem_into_none_field_is_an_error():
    p = Points(np.zeros(3), None)
    p[0] = Points(1.0, None)  # None on both sides: skipped
    assert p.x[0] == 1.0
    with pytest.raises(ValueError, match="'y'"):
        p[0] = Points(1.0, 2.0)


def test_index_error_names_the_field():
    p = Points(np.zeros(5), np.zeros(2))
    with pytest.raises(IndexError) as info:
        p[3]
    if hasattr(info.value, "__notes__"):
        assert any("'y'" in note for note in info.value.__notes__)


def test_field_access_and_namedtuple_api():
    p = Points(np.zeros(2), np.ones(2))
    assert p._fields == ("x", "y") and Points._fields == ("x", "y")
    q = p._replace(y=None)
    assert type(q) is Points and q.y is None and q.x is p.x
    assert list(p._asdict()) == ["x", "y"]
    r = Points._make([1, 2])
    assert (r.x, r.y) == (1, 2)
    assert repr(r) == "Points(x=1, y=2)"
    with pytest.raises(AttributeError):
        p.x = 3


def test_suffix_and_namedtuple_cls():
    assert Pair_nt.__name__ == "Pair_nt" and Pair_nat.__name__ == "Pair_nat"
    assert issubclass(Pair_nat, Pair_nt) and is_namedtuple_class(Pair_nt)
    inst = Pair_nat(np.arange(3), np.arange(3) * 2)
    assert inst[2] == (2, 4)


def test_invalid_names_rejected():
    with pytest.raises(ValueError, match="underscore"):
        namedarraytuple("Bad", ["_x"])
    with pytest.raises(ValueError, match="Duplicate"):
        namedarraytuple("Bad", "x x")
    with pytest.raises(ValueError, match="identifier"):
        namedarraytuple("Bad", ["class"])


def test_pickle_classic_by_reference_and_by_value():
    nat = make_outer()
    out = pickle.loads(pickle.dumps(nat))
    assert type(out) is Outer and type(out.inner) is Inner
    np.testing.assert_array_equal(out.obs, nat.obs)
    assert torch.equal(out.inner.a, nat.inner.a) and out.extra is None

    def local_type():  # class not reachable as a module attribute
        return namedarraytuple("Hidden", ["h"])
    hidden = local_type()(np.arange(3))
    back = pickle.loads(pickle.dumps(hidden))
    assert is_namedarraytuple(back) and type(back).__name__ == "Hidden"
    assert back[1:].h.tolist() == [1, 2]
    assert type(pickle.loads(pickle.dumps(hidden))) is type(back)  # rebuilt class is reused


def test_namedarraytuple_like():
    assert namedarraytuple_like(Points) is Points
    assert namedarraytuple_like(Points(1, 2)) is Points
    for source in (PlainNt, PlainNt(1, 2), NamedTupleSchema("PlainNt", "p q"),
                   NamedArrayTupleSchema("PlainNt", "p q")(1, 2)):
        cls = namedarraytuple_like(source)
        assert is_namedarraytuple_class(cls) and cls.__name__ == "PlainNt"
        assert cls._fields == ("p", "q")
    assert namedarraytuple_like(PlainNt, classname_suffix=True).__name__ == "PlainNt_nat"
    with pytest.raises(TypeError, match="namedtuple"):
        namedarraytuple_like((1, 2))


def test_predicates():
    nt_schema = NamedTupleSchema("A", ["a"])
    nat_schema = NamedArrayTupleSchema("A", ["a"])
    cases = {  # obj: (is_nt_class, is_nat_class, is_nt, is_nat)
        "PlainNt": (PlainNt, (True, False, False, False)),
        "Points": (Points, (False, True, False, False)),
        "nt_inst": (PlainNt(1, 2), (False, False, True, False)),
        "nat_inst": (Points(1, 2), (False, False, False, True)),
        "nt_schema": (nt_schema, (True, False, False, False)),
        "nat_schema": (nat_schema, (False, True, False, False)),
        "NamedTuple": (nt_schema(1), (False, False, True, False)),
        "NamedArrayTuple": (nat_schema(1), (False, False, False, True)),
        "tuple": ((1, 2), (False, False, False, False)),
        "tuple_cls": (tuple, (False, False, False, False)),
        "dict": ({"a": 1}, (False, False, False, False)),
    }
    for name, (obj, expected) in cases.items():
        got = (is_namedtuple_class(obj), is_namedarraytuple_class(obj), is_namedtuple(obj),
               is_namedarraytuple(obj))
        assert got == expected, name


# ---------------------------------------------------------------- schema implementation

def test_schema_constructs_like_namedtuple():
    schema = NamedTupleSchema("Step", "obs, reward")
    assert schema._typename == "Step" and schema._fields == ("obs", "reward")
    s = schema(1, reward=2)
    assert type(s) is NamedTuple and s.obs == 1 and s.reward == 2 and s == (1, 2)
    assert schema._make([3, 4]) == (3, 4) and s._make([5, 6]).reward == 6
    assert repr(s) == "Step(obs=1, reward=2)" and s._asdict() == {"obs": 1, "reward": 2}
    assert hasattr(s, "obs") and not hasattr(s, "missing")
    r = s._replace(reward=9)
    assert r == (1, 9) and r._typename == "Step" and s.reward == 2
    with pytest.raises(ValueError, match="unexpected"):
        s._replace(nope=1)
    with pytest.raises(TypeError):
        schema(1)
    with pytest.raises(TypeError):
        schema(1, 2, 3)
    with pytest.raises(TypeError):
        schema(1, 2, bogus=3)
    with pytest.raises(AttributeError):
        s.obs = 5
    assert schema == NamedTupleSchema("Step", ["obs", "reward"])
    assert schema != NamedArrayTupleSchema("Step", ["obs", "reward"])


def test_schema_array_indexing_reads_and_writes():
    schema = NamedArrayTupleSchema("Sample", ["obs", "act", "none"])
    nested = NamedArrayTupleSchema("Nested", ["s", "w"])
    data = nested(schema(np.arange(12.0).reshape(4, 3), torch.arange(4), None),
                  w=np.zeros(4))
    row = data[2]
    assert type(row) is NamedArrayTuple and row._typename == "Nested"
    assert row.s.obs.tolist() == [6.0, 7.0, 8.0] and int(row.s.act) == 2 and row.s.none is None
    window = data[1:3]
    assert window.s.obs.shape == (2, 3) and window.s.act.tolist() == [1, 2]
    data[0] = 1
    assert np.all(data.s.obs[0] == 1) and int(data.s.act[0]) == 1 and data.w[0] == 1
    data[3] = nested(schema(np.full(3, 5.0), torch.tensor(8), None), w=2.0)
    assert data.s.obs[3].tolist() == [5.0] * 3 and int(data.s.act[3]) == 8
    assert data.w.tolist() == [1.0, 0.0, 0.0, 2.0]
    assert "obs" in data.s and "w" in data and "zz" not in data
    assert data.get(1) is data.w and [k for k, _ in data.items()] == ["s", "w"]


def test_schema_pickles_by_value_and_copies():
    schema = NamedArrayTupleSchema("Sample", ["obs", "act"])
    inst = schema(np.arange(3), torch.arange(3))
    for out in (pickle.loads(pickle.dumps(inst)), copy.deepcopy(inst)):
        assert type(out) is NamedArrayTuple and out._typename == "Sample"
        assert out.obs.tolist() == [0, 1, 2] and torch.equal(out.act, inst.act)
        assert out[1:].obs.tolist() == [1, 2]
    back = pickle.loads(pickle.dumps(schema))
    assert back == schema and type(back) is NamedArrayTupleSchema
    assert back(1, 2)._fields == ("obs", "act")


def test_schema_like():
    target = NamedArrayTupleSchema("PlainNt", ["p", "q"])
    for source in (PlainNt, PlainNt(1, 2), namedarraytuple_like(PlainNt),
                   NamedTupleSchema("PlainNt", "p q"), NamedTupleSchema("PlainNt", "p q")(1, 2),
                   NamedArrayTupleSchema("PlainNt", "p q")(1, 2)):
        assert NamedArrayTupleSchema_like(source) == target
    assert NamedArrayTupleSchema_like(target) is target
    with pytest.raises(TypeError):
        NamedArrayTupleSchema_like([1, 2])


def _run_spawn(target, args, result_queue):
    proc = mp.get_context("spawn").Process(target=target, args=(*args, result_queue))
    proc.start()
    try:
        result = result_queue.get(timeout=60)
    finally:
        proc.join(timeout=60)
        if proc.is_alive():
            proc.terminate()
            proc.join()
    assert proc.exitcode == 0
    return result


def test_schema_types_survive_spawn():
    ctx = mp.get_context("spawn")
    schema = NamedArrayTupleSchema("Step", ["observation", "reward"])
    nat = schema(np.arange(8.0).reshape(4, 2), np.array([0.5, 1.5, 2.5, 3.5]))
    result = _run_spawn(_spawn_helpers.read_and_index,
                        (nat, NamedArrayTupleSchema("Built", ["left", "right"])), ctx.Queue())
    assert "error" not in result, result
    assert result["typename"] == "Step" and result["fields"] == ("observation", "reward")
    assert result["obs_sum"] == 28.0 and result["row_obs"] == [2.0, 3.0]
    assert result["row_reward"] == 1.5 and result["window_shape"] == (2, 2)
    assert result["built"] == ([5.0, 0.0, 0.0], [6.0, 1.0, 1.0])
    assert result["schema_fields"] == ("left", "right")
    assert result["is_nat_type"] == "NamedArrayTuple"


def test_module_level_classic_type_survives_spawn():
    ctx = mp.get_context("spawn")
    pair = _spawn_helpers.SpawnPair(np.arange(4), np.arange(4) * 10)
    assert _run_spawn(_spawn_helpers.index_classic, (pair,), ctx.Queue()) == ("SpawnPair", 2, 20)


# ---------------------------------------------------------------- AttrDict

def test_attrdict_access_and_copy():
    d = AttrDict(a=1, nested=AttrDict(b=np.zeros(2), deeper=AttrDict(c=[1])), plain={"k": 1})
    assert d.a == d["a"] == 1
    d.z = 5
    assert d["z"] == 5
    d["y"] = 6
    assert d.y == 6
    del d.y
    assert "y" not in d
    with pytest.raises(AttributeError, match="missing"):
        d.missing
    assert dict(d.items())["a"] == 1

    c = d.copy()
    assert type(c) is AttrDict and c == d
    assert c.nested is not d.nested and c.nested.deeper is not d.nested.deeper
    assert c.nested.b is d.nested.b and c.plain is d.plain  # non-AttrDict values shared
    c.nested.deeper.new = 1
    assert "new" not in d.nested.deeper

    back = pickle.loads(pickle.dumps(d))
    assert set(back) == set(d) and back.a == 1 and type(back.nested) is AttrDict
    np.testing.assert_array_equal(back.nested.b, d.nested.b)
    back.q = 3
    assert back["q"] == 3


def test_attrdict_subclass():
    class Config(AttrDict):
        def __init__(self, lr=0.1, **kwargs):
            super().__init__(lr=lr, **kwargs)

        def doubled(self):
            return 2 * self.lr

    cfg = Config(steps=10)
    assert cfg.doubled() == 0.2 and cfg.steps == 10
    dup = cfg.copy()
    assert type(dup) is Config and dup == cfg
