"""House style: no inheritance towers. Every class defined in rlfast has at most three
levels of rlfast base classes (itself counted) and at most five rlfast classes in its MRO.

Only rlfast classes count: ``object``, ``nn.Module``, ``abc.ABC``, ``tuple`` and other
libraries' classes are free. See ARCHITECTURE.md ("keep inheritance at most three levels
deep"; prefer composition to stacked mixins).
"""
from __future__ import annotations

import importlib
import inspect
import pkgutil

import rlfast

MAX_DEPTH = 3
MAX_RLFAST_IN_MRO = 5
MIN_CLASSES = 150  # the walk must see the package, or the test would pass vacuously


def _is_rlfast(cls: type) -> bool:
    module = getattr(cls, "__module__", "") or ""
    return module == "rlfast" or module.startswith("rlfast.")


def _name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _depth(cls: type) -> int:
    """Longest chain of rlfast base classes, ``cls`` itself counted."""
    return 1 + max((_depth(b) for b in cls.__bases__ if _is_rlfast(b)), default=0)


def _rlfast_classes() -> tuple[dict[str, type], list[str]]:
    """Every class defined in an rlfast module (by ``__module__``), and import failures."""
    failures: list[str] = []
    modules = [rlfast]
    for info in pkgutil.walk_packages(rlfast.__path__, "rlfast.",
                                      onerror=lambda name: failures.append(name)):
        if info.name == "rlfast.__main__" or info.name.endswith(".__main__"):
            continue  # running it would start the command line
        try:
            modules.append(importlib.import_module(info.name))
        except Exception as e:  # report every module that does not import, then fail
            failures.append(f"{info.name}: {type(e).__name__}: {e}")
    classes = {}
    for module in modules:
        for value in vars(module).values():
            if inspect.isclass(value) and value.__module__ == module.__name__:
                classes[_name(value)] = value
    return classes, failures


def test_inheritance_is_shallow():
    classes, failures = _rlfast_classes()
    assert not failures, "modules that do not import:\n  " + "\n  ".join(failures)
    assert len(classes) >= MIN_CLASSES, f"only {len(classes)} rlfast classes found"
    offenders = []
    for name, cls in sorted(classes.items()):
        depth = _depth(cls)
        mro = [_name(c) for c in cls.__mro__ if _is_rlfast(c)]
        if depth > MAX_DEPTH or len(mro) > MAX_RLFAST_IN_MRO:
            offenders.append(f"{name}: depth {depth}, {len(mro)} rlfast classes in MRO: "
                             f"{' -> '.join(mro)}")
    assert not offenders, (
        f"{len(offenders)} of {len(classes)} rlfast classes exceed depth {MAX_DEPTH} or "
        f"{MAX_RLFAST_IN_MRO} rlfast classes in their MRO:\n  " + "\n  ".join(offenders))
