"""Import a file of ``scripts/`` as a module for the length of a test module."""
from __future__ import annotations

import contextlib
import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


@contextlib.contextmanager
def script_module(filename: str, name: str) -> Iterator[ModuleType]:
    """``scripts/<filename>`` imported as module ``name``, registered in ``sys.modules`` while
    the context lasts (dataclasses look their module up by name)."""
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / filename)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(name, None)
