"""A space made of named sub-spaces, whose values are namedtuples."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from rlfast.spaces.base import SeedLike, Space


class Composite(Space):
    """Combines sub-spaces, given in order, into one space whose samples and null values are
    instances of ``NamedTupleCls`` (a ``namedtuple`` class, or a ``NamedTupleSchema`` so that
    dynamically made types still pickle under spawn). The field order of ``NamedTupleCls``
    names the sub-spaces, which lets dict observations travel through the sampler's
    pre-allocated namedarraytuple buffers field by field."""

    def __init__(self, spaces: Sequence[Space], NamedTupleCls: Any) -> None:
        spaces = list(spaces)
        fields = getattr(NamedTupleCls, "_fields", None)
        if fields is None:
            raise TypeError(
                f"Composite NamedTupleCls must be a namedtuple class or NamedTupleSchema "
                f"(something with _fields), got {NamedTupleCls!r}"
            )
        if len(fields) != len(spaces):
            raise ValueError(
                f"Composite got {len(spaces)} sub-spaces for the {len(fields)} fields "
                f"{tuple(fields)} of {NamedTupleCls!r}"
            )
        for field, space in zip(fields, spaces):
            if not isinstance(space, Space):
                raise TypeError(
                    f"Composite sub-space {field!r} must be an rlfast Space (IntBox, FloatBox, "
                    f"Composite), got {type(space).__name__}"
                )
        self._spaces = spaces
        self._NamedTupleCls = NamedTupleCls

    @property
    def NamedTupleCls(self) -> Any:
        """The namedtuple class (or schema) that organizes values of this space."""
        return self._NamedTupleCls

    def sample(self) -> Any:
        """Return a namedtuple of one sample from every sub-space."""
        return self._NamedTupleCls(*(space.sample() for space in self._spaces))

    def null_value(self) -> Any:
        """Return a namedtuple of the null value of every sub-space."""
        return self._NamedTupleCls(*(space.null_value() for space in self._spaces))

    def seed(self, seed: SeedLike = None) -> None:
        """Seed every sub-space with an independent child of ``seed`` (``None``: global RNG)."""
        if seed is None:
            for space in self._spaces:
                space.seed(None)
            return
        if not isinstance(seed, (int, np.integer, np.random.SeedSequence)):
            raise TypeError(f"seed must be an int, a numpy SeedSequence or None, got {seed!r}")
        root = (seed if isinstance(seed, np.random.SeedSequence)
                else np.random.SeedSequence(int(seed)))
        for space, child in zip(self._spaces, root.spawn(len(self._spaces))):
            space.seed(child)

    def contains(self, x: Any) -> bool:
        """True if ``x`` has one value per field and each lies in its sub-space."""
        try:
            values = tuple(x)
        except TypeError:
            return False
        if len(values) != len(self._spaces):
            return False
        return all(space.contains(value) for space, value in zip(self._spaces, values))

    @property
    def shape(self) -> Any:
        """Namedtuple of the shapes of the sub-spaces."""
        return self._NamedTupleCls(*(space.shape for space in self._spaces))

    @property
    def names(self) -> tuple:
        """Field names of the sub-spaces, in order."""
        return tuple(self._NamedTupleCls._fields)

    @property
    def spaces(self) -> list:
        """The bare sub-spaces, in field order."""
        return list(self._spaces)

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Composite)
            and self.names == other.names
            and all(a == b for a, b in zip(self._spaces, other._spaces))
        )

    __hash__ = None

    def __repr__(self) -> str:
        inner = ", ".join(f"{name}={space!r}" for name, space in zip(self.names, self._spaces))
        return f"Composite({inner})"
