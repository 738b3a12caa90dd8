"""Every public method of the samplers, runners and algorithms has a docstring and type hints.

The pipeline's public surface (``initialize``, ``obtain_samples``, ``evaluate_agent``,
``optimize_agent``, ``train`` and the rest) is documented the way Stable-Baselines3 documents
its own: a docstring (its own, or the one of the method it overrides) and annotations on every
named parameter and on the return value.
"""
from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

from rlfast.utils.collections import is_namedarraytuple_class, is_namedtuple_class

PACKAGES = ("rlfast.samplers", "rlfast.runners", "rlfast.algos")


def _classes():
    found = {}
    for package_name in PACKAGES:
        package = importlib.import_module(package_name)
        names = [package_name] + [m.name for m in pkgutil.walk_packages(package.__path__,
                                                                        package_name + ".")]
        for name in names:
            module = importlib.import_module(name)
            for obj in vars(module).values():
                if (inspect.isclass(obj) and obj.__module__ == name
                        and not is_namedtuple_class(obj) and not is_namedarraytuple_class(obj)):
                    found[f"{name}.{obj.__qualname__}"] = obj
    return found


def _public_methods(cls):
    for name, attr in vars(cls).items():
        if name.startswith("_") or not inspect.isfunction(attr):
            continue
        yield name, attr


def _problems(cls) -> list[str]:
    problems = []
    for name, fn in _public_methods(cls):
        where = f"{cls.__module__}.{cls.__qualname__}.{name}"
        if not inspect.getdoc(getattr(cls, name)):
            problems.append(f"{where}: no docstring")
        sig = inspect.signature(fn)
        for pname, param in sig.parameters.items():
            if pname in ("self", "cls") or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                continue
            if param.annotation is inspect.Parameter.empty:
                problems.append(f"{where}: parameter {pname!r} has no type hint")
        if sig.return_annotation is inspect.Signature.empty:
            problems.append(f"{where}: no return type hint")
    return problems


def test_found_the_pipeline_classes():
    names = _classes()
    assert len(names) >= 30
    for expected in ("SerialSampler", "CpuSampler", "GpuSampler", "MinibatchRl", "PPO", "DQN"):
        assert any(n.endswith("." + expected) for n in names), expected


@pytest.mark.parametrize("package", PACKAGES)
def test_public_methods_documented_and_typed(package):
    problems = [p for qualname, cls in sorted(_classes().items())
                if qualname.startswith(package) for p in _problems(cls)]
    assert not problems, f"{len(problems)} gaps:\n" + "\n".join(problems)
