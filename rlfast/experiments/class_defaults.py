"""A class's own defaults, read from its signature.

A configuration exposes some constructor parameters that no preset sets (so that ``--set``
can reach them and the run's record names them): ``algo.compile``, ``agent.autocast``,
``runner.stop_return``, ... Their values are the defaults of the classes that take them,
read here from those classes' signatures, so that each default is written once, where the
class is defined, and a changed default reaches every configuration.
"""
from __future__ import annotations

import inspect
from typing import Any

__all__ = ["class_default", "class_defaults"]


def _own_parameters(klass: type) -> dict[str, inspect.Parameter] | None:
    """The parameters of ``klass``'s own ``__init__`` (None when it defines none)."""
    init = vars(klass).get("__init__")
    if init is None:
        return None
    try:
        return dict(inspect.signature(init).parameters)
    except (TypeError, ValueError):  # a builtin's __init__ without a signature
        return None


def class_default(cls: type, name: str) -> Any:
    """The value ``cls(...)`` gives its parameter ``name`` when the caller leaves it out.

    Walks ``cls.__mro__`` as a call does: the first ``__init__`` that names ``name`` gives
    its default; one that does not name it passes it on only through ``**kwargs``. A
    parameter without a default, or one that no ``__init__`` on the way accepts, is a
    ``ValueError`` that names the class and the parameters with defaults it does take.
    """
    seen: list[str] = []
    for klass in cls.__mro__:
        params = _own_parameters(klass)
        if params is None:
            continue
        param = params.get(name)
        if param is not None and param.kind not in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            if param.default is inspect.Parameter.empty:
                raise ValueError(f"{cls.__name__}: parameter {name!r} has no default")
            return param.default
        seen.extend(p.name for p in params.values()
                    if p.default is not inspect.Parameter.empty and p.name not in seen)
        if not any(p.kind == p.VAR_KEYWORD for p in params.values()):
            break
    raise ValueError(f"{cls.__name__} takes no parameter {name!r} with a default; its "
                     f"parameters with defaults: {', '.join(seen) or 'none'}")


def class_defaults(cls: type, *names: str) -> dict[str, Any]:
    """``{name: class_default(cls, name)}`` for each of ``names``, in their order."""
    return {name: class_default(cls, name) for name in names}
