"""Named tuples whose indexing applies to every field, plus a small attribute dict.

A *namedarraytuple* is a namedtuple whose fields are arrays (numpy arrays, torch
tensors, or further namedarraytuples) sharing leading dimensions; indexing it with an
int, slice, index array or tuple indexes every field at once and returns a new instance
of the same type, and assigning into an index writes every field. Samples, agent
inputs and replay buffers are all built from them, so reads and writes of a whole
``[T, B]`` structure are one line. Two implementations are provided: the classic one
(``namedarraytuple``) defines a real class per type, with C-speed field access; the
*Schema* one (``NamedTupleSchema`` / ``NamedArrayTupleSchema``) uses a single instance
class for all types and pickles by value, which is convenient under the ``spawn`` start
method and for types created on the fly.
"""

from __future__ import annotations

import keyword
import sys
from collections import namedtuple
from itertools import repeat
from typing import Any, Iterable, Iterator

__all__ = [
    "namedarraytuple", "namedarraytuple_like", "is_namedtuple", "is_namedarraytuple",
    "is_namedtuple_class", "is_namedarraytuple_class", "NamedTupleSchema",
    "NamedArrayTupleSchema", "NamedTuple", "NamedArrayTuple", "NamedArrayTupleSchema_like",
    "AttrDict",
]


def _parse_fields(typename: Any, field_names: Any) -> tuple[str, tuple[str, ...]]:
    """Validate a type name and field names with the rules of ``collections.namedtuple``."""
    if isinstance(field_names, str):
        field_names = field_names.replace(",", " ").split()
    fields = tuple(str(f) for f in field_names)
    for name in (typename, *fields):
        if not isinstance(name, str) or not name.isidentifier() or keyword.iskeyword(name):
            raise ValueError(f"Names must be valid, non-keyword identifiers; got {name!r}.")
    seen = set()
    for name in fields:
        if name.startswith("_"):
            raise ValueError(f"Field names cannot start with an underscore; got {name!r}.")
        if name in seen:
            raise ValueError(f"Duplicate field name {name!r} in {fields}.")
        seen.add(name)
    return typename, fields


def _add_note(err: BaseException, note: str) -> None:
    if hasattr(err, "add_note"):  # Python >= 3.11
        err.add_note(note)


# Methods shared by the classic namedarraytuple classes and NamedArrayTuple.

def _nat_getitem(self, loc):
    """Return a new instance holding ``field[loc]`` for every field (None stays None)."""
    try:
        return self._new_like([None if s is None else s[loc] for s in self])
    except Exception as err:
        for name, s in zip(self._fields, self):
            if s is not None:
                try:
                    s[loc]
                except Exception:
                    _add_note(err, f"while indexing field {name!r} of "
                                   f"{_typename_of(self)} with {loc!r}")
                    break
        raise


def _nat_setitem(self, loc, value) -> None:
    """Write ``value`` at ``loc`` into every field.

    A value with the same field names is written field by field (recursively for nested
    structures); fields that are None on both sides are skipped, and a None destination
    with a non-None source is an error (the data would be lost). Any other value is
    broadcast whole into every non-None field.
    """
    fields = self._fields
    fieldwise = isinstance(value, tuple) and getattr(value, "_fields", None) == fields
    for name, s, v in zip(fields, self, value if fieldwise else repeat(value)):
        if s is None:
            if fieldwise and v is not None:
                raise ValueError(f"Cannot write a value into field {name!r} of "
                                 f"{_typename_of(self)}: the destination field is None.")
            continue
        try:
            s[loc] = v
        except Exception as err:
            _add_note(err, f"while writing field {name!r} of {_typename_of(self)} at {loc!r}")
            raise


def _nat_contains(self, key) -> bool:
    """Check presence of a field name (like a dict, unlike a tuple)."""
    return key in self._fields


def _nat_get(self, index):
    """Retrieve a field as if indexing into a regular tuple."""
    return tuple.__getitem__(self, index)


def _nat_items(self) -> Iterator[tuple[str, Any]]:
    """Iterate ordered ``(field_name, value)`` pairs (like a dict)."""
    return zip(self._fields, self)


def _typename_of(obj) -> str:
    return obj._typename if isinstance(obj, NamedTuple) else type(obj).__name__


# Classic implementation: one real class per type.

def _classic_new_like(self, values):
    return tuple.__new__(type(self), values)


def _classic_reduce(self):
    """Pickle by reference when the class can be found by name, else by value."""
    cls = type(self)
    module = sys.modules.get(cls.__module__)
    if module is not None and getattr(module, cls.__qualname__, None) is cls:
        return cls, tuple(self)
    return _rebuild_namedarraytuple, (cls.__name__, cls._fields, cls.__module__, tuple(self))


_REBUILT_CLASSES: dict = {}


def _rebuild_namedarraytuple(typename, fields, module, values):
    """Unpickle an instance of a class that was not reachable by module attribute."""
    cls = getattr(sys.modules.get(module), typename, None)
    if not (is_namedarraytuple_class(cls) and isinstance(cls, type) and cls._fields == fields):
        key = (module, typename, fields)
        cls = _REBUILT_CLASSES.get(key)
        if cls is None:
            cls = _REBUILT_CLASSES[key] = namedarraytuple(typename, fields, module=module)
    return tuple.__new__(cls, values)


def namedarraytuple(typename: str, field_names: Iterable[str] | str,
                    return_namedtuple_cls: bool = False, classname_suffix: bool = False,
                    *, module: str | None = None):
    """Return a namedtuple subclass whose indexing reads and writes apply to all fields.

    ``p[loc]`` returns a new instance with ``field[loc]`` in every field (nested
    namedarraytuples are indexed recursively, None fields stay None); ``p[loc] = value``
    writes field by field when ``value`` has the same fields, else broadcasts ``value``
    into every field; ``p.get(i)`` is plain tuple indexing; ``"name" in p`` tests field
    names; ``p.items()`` yields ``(name, value)`` pairs. Field access by attribute is
    the namedtuple's own (fast). With ``classname_suffix`` the classes are named
    ``typename + "_nat"`` (and the namedtuple base ``typename + "_nt"``), so both can live
    in one module; ``return_namedtuple_cls`` returns ``(NamedtupleCls, NamedArrayTupleCls)``.
    ``module`` (default: the caller's module) is where pickle looks the class up; an
    instance whose class is not found there is pickled by value instead.
    """
    typename, fields = _parse_fields(typename, field_names)
    nt_typename, nat_typename = typename, typename
    if classname_suffix:
        nt_typename, nat_typename = typename + "_nt", typename + "_nat"
    if module is None:
        try:
            module = sys._getframe(1).f_globals.get("__name__", "__main__")
        except (AttributeError, ValueError):
            module = "__main__"
    nt_cls = namedtuple(nt_typename, fields, module=module)
    namespace = {
        "__slots__": (),
        "__doc__": f"{nat_typename}({', '.join(fields)}): namedarraytuple.",
        "__module__": module,
        "_array_indexing": True,
        "_new_like": _classic_new_like,
        "__getitem__": _nat_getitem,
        "__setitem__": _nat_setitem,
        "__contains__": _nat_contains,
        "__reduce__": _classic_reduce,
        "get": _nat_get,
        "items": _nat_items,
    }
    nat_cls = type(nat_typename, (nt_cls,), namespace)
    return (nt_cls, nat_cls) if return_namedtuple_cls else nat_cls


def namedarraytuple_like(namedtuple_or_class: Any, classname_suffix: bool = False):
    """Return a namedarraytuple class with the name and fields of the input.

    The input may be a namedtuple or namedarraytuple class or instance (a namedarraytuple
    class is returned as is), or any of NamedTupleSchema, NamedArrayTupleSchema,
    NamedTuple, NamedArrayTuple. Used to turn an example structure into a buffer type.
    """
    obj = namedtuple_or_class
    if is_namedarraytuple_class(obj) and isinstance(obj, type):
        return obj
    if is_namedarraytuple(obj) and not isinstance(obj, NamedTuple):
        return type(obj)
    if isinstance(obj, (NamedTupleSchema, NamedTuple)):
        module = sys._getframe(1).f_globals.get("__name__", "__main__")
        return namedarraytuple(obj._typename, obj._fields, classname_suffix=classname_suffix,
                               module=module)
    cls = obj if isinstance(obj, type) else type(obj)
    if is_namedtuple_class(cls):
        return namedarraytuple(cls.__name__, cls._fields, classname_suffix=classname_suffix,
                               module=cls.__module__)
    raise TypeError(f"Input must be a namedtuple or namedarraytuple class or instance, or a "
                    f"Named[Array]Tuple[Schema]; got {obj!r} of type {type(obj).__name__}.")


def _is_classic_class(obj: Any) -> bool:
    return (isinstance(obj, type) and issubclass(obj, tuple)
            and isinstance(getattr(obj, "_fields", None), tuple)
            and hasattr(obj, "_make") and hasattr(obj, "_asdict"))


def is_namedtuple_class(obj: Any) -> bool:
    """True for namedtuple classes and NamedTupleSchema objects (heuristic; False for the
    namedarraytuple counterparts)."""
    if isinstance(obj, NamedTupleSchema):
        return not isinstance(obj, NamedArrayTupleSchema)
    return _is_classic_class(obj) and not getattr(obj, "_array_indexing", False)


def is_namedarraytuple_class(obj: Any) -> bool:
    """True for namedarraytuple classes and NamedArrayTupleSchema objects (heuristic;
    False for plain namedtuple classes)."""
    if isinstance(obj, NamedTupleSchema):
        return isinstance(obj, NamedArrayTupleSchema)
    return _is_classic_class(obj) and getattr(obj, "_array_indexing", False) is True


def is_namedtuple(obj: Any) -> bool:
    """True for namedtuple and NamedTuple instances (heuristic; False for namedarraytuples)."""
    if isinstance(obj, NamedTuple):
        return not isinstance(obj, NamedArrayTuple)
    return is_namedtuple_class(type(obj))


def is_namedarraytuple(obj: Any) -> bool:
    """True for namedarraytuple and NamedArrayTuple instances (heuristic; False for
    plain namedtuples)."""
    if isinstance(obj, NamedTuple):
        return isinstance(obj, NamedArrayTuple)
    return is_namedarraytuple_class(type(obj))


# Schema implementation: one instance class for all types, pickled by value.

class NamedTuple(tuple):
    """Instance of a namedtuple-like type described by a typename and field names.

    The same class serves every type, so nothing has to be defined at module level for
    pickling (the typename and fields travel with the instance). Differences from a true
    namedtuple: fields are found through ``__getattr__`` (so they are absent from
    ``dir()`` but ``hasattr`` works), and ``_typename`` / ``_fields`` live in the instance
    ``__dict__``.
    """

    def __new__(cls, typename: str, fields: tuple[str, ...], values: Iterable[Any]):
        self = tuple.__new__(cls, values)
        if len(self) != len(fields):
            raise TypeError(f"{typename} expected {len(fields)} values for fields {fields}, "
                            f"got {len(self)}.")
        object.__setattr__(self, "_typename", typename)
        object.__setattr__(self, "_fields", tuple(fields))
        return self

    def __getattr__(self, name: str):
        """Look in ``_fields`` when ``name`` is not a regular attribute."""
        if not name.startswith("_"):
            try:
                return tuple.__getitem__(self, self._fields.index(name))
            except ValueError:
                pass
        raise AttributeError(f"{type(self).__name__} {self.__dict__.get('_typename')!r} "
                             f"has no attribute {name!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{self._typename} is immutable; cannot set {name!r} "
                             f"(use _replace).")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"{self._typename} is immutable; cannot delete {name!r}.")

    def __reduce__(self):
        return type(self), (self._typename, self._fields, tuple(self))

    def __repr__(self) -> str:
        body = ", ".join(f"{f}={v!r}" for f, v in zip(self._fields, self))
        return f"{self._typename}({body})"

    def _make(self, iterable: Iterable[Any]) -> "NamedTuple":
        """Make a new object of the same typename and fields from an iterable."""
        return type(self)(self._typename, self._fields, iterable)

    def _replace(self, **kwargs: Any) -> "NamedTuple":
        """Return a new object with the named fields replaced by new values."""
        values = [kwargs.pop(f, v) for f, v in zip(self._fields, self)]
        if kwargs:
            raise ValueError(f"Got unexpected field names {sorted(kwargs)} for "
                             f"{self._typename}; valid: {self._fields}.")
        return self._make(values)

    def _asdict(self) -> dict[str, Any]:
        """Return a dict mapping field names to values, in field order."""
        return dict(zip(self._fields, self))


class NamedArrayTuple(NamedTuple):
    """NamedTuple whose indexing reads and writes apply to every field, like a
    namedarraytuple instance."""

    _array_indexing = True
    _new_like = NamedTuple._make
    __getitem__ = _nat_getitem
    __setitem__ = _nat_setitem
    __contains__ = _nat_contains
    get = _nat_get
    items = _nat_items


class NamedTupleSchema:
    """Acts like a class returned by ``namedtuple()``: calling it builds NamedTuple
    instances of this typename and these fields. Picklable by value."""

    __slots__ = ("_typename", "_fields")
    _instance_cls = NamedTuple

    def __init__(self, typename: str, fields: Iterable[str] | str):
        typename, fields = _parse_fields(typename, fields)
        object.__setattr__(self, "_typename", typename)
        object.__setattr__(self, "_fields", fields)

    def __call__(self, *args: Any, **kwargs: Any) -> NamedTuple:
        """Build an instance from positional and keyword field values, like namedtuple."""
        fields = self._fields
        if len(args) > len(fields):
            raise TypeError(f"{self._typename} takes {len(fields)} values, got {len(args)}.")
        values = list(args)
        for name in fields[len(args):]:
            if name not in kwargs:
                raise TypeError(f"{self._typename} missing value for field {name!r}.")
            values.append(kwargs.pop(name))
        if kwargs:
            raise TypeError(f"{self._typename} got unexpected or repeated fields "
                            f"{sorted(kwargs)}; fields: {fields}.")
        return self._instance_cls(self._typename, fields, values)

    def _make(self, iterable: Iterable[Any]) -> NamedTuple:
        """Build an instance from an iterable of field values, like namedtuple._make."""
        return self._instance_cls(self._typename, self._fields, iterable)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable; cannot set {name!r}.")

    def __reduce__(self):
        return type(self), (self._typename, self._fields)

    def __eq__(self, other: Any) -> bool:
        return (type(other) is type(self) and other._typename == self._typename
                and other._fields == self._fields)

    def __hash__(self) -> int:
        return hash((type(self).__name__, self._typename, self._fields))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._typename!r}, {self._fields!r})"


class NamedArrayTupleSchema(NamedTupleSchema):
    """Acts like a class returned by ``namedarraytuple()``, building NamedArrayTuple
    instances."""

    __slots__ = ()
    _instance_cls = NamedArrayTuple


def NamedArrayTupleSchema_like(example: Any) -> NamedArrayTupleSchema:
    """Return a NamedArrayTupleSchema with the name and fields of ``example``: a class or
    instance of namedtuple or namedarraytuple, or a NamedTupleSchema, NamedTuple,
    NamedArrayTupleSchema (returned as is) or NamedArrayTuple."""
    if isinstance(example, NamedArrayTupleSchema):
        return example
    if isinstance(example, (NamedTupleSchema, NamedTuple)):
        return NamedArrayTupleSchema(example._typename, example._fields)
    cls = example if isinstance(example, type) else type(example)
    if _is_classic_class(cls):
        return NamedArrayTupleSchema(cls.__name__, cls._fields)
    raise TypeError(f"Expected a namedtuple/namedarraytuple class or instance or a "
                    f"Named[Array]Tuple[Schema]; got {example!r} of type "
                    f"{type(example).__name__}.")


class AttrDict(dict):
    """A dict whose keys can also be read and written as attributes (``d.k is d["k"]``).

    Used for configs and affinities, where attribute access reads well. Subclasses may
    add methods and must call ``AttrDict.__init__`` if they define ``__init__``.
    """

    __slots__ = ()

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(f"{type(self).__name__} has no key or attribute "
                                 f"{name!r}; keys: {list(self)}") from None

    def __setattr__(self, name: str, value: Any) -> None:
        self[name] = value

    def __delattr__(self, name: str) -> None:
        try:
            del self[name]
        except KeyError:
            raise AttributeError(f"{type(self).__name__} has no key {name!r}.") from None

    def copy(self) -> "AttrDict":
        """Copy every unbroken chain of AttrDicts; other values (arrays, lists, plain
        dicts) are shared, not copied."""
        new = type(self).__new__(type(self))
        dict.update(new, ((k, v.copy() if isinstance(v, AttrDict) else v)
                          for k, v in self.items()))
        return new
