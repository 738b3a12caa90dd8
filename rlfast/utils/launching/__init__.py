"""Hardware affinity codes and hyperparameter variants: what a run needs to know about its
share of the machine and its settings, used by the runners and the launcher alike.

The launcher itself (``run_experiments``, ``launch_experiment``, ``report_sweep``, the Slurm
backend) lives in :mod:`rlfast.launching`, a layer above the runners. Its names and the old
submodules ``exp_launcher``, ``slurm`` and ``slurm_job`` can still be imported from here, with
a ``DeprecationWarning`` naming the new path: they are looked up on first use (a module-level
``__getattr__`` and an import-system alias), so importing this package never imports
:mod:`rlfast.launching`.
"""
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
import warnings
from typing import Any

from rlfast.utils.launching.affinity import (affinity_from_code, encode_affinity,
                                             get_n_run_slots, make_affinity, prepend_run_slot,
                                             validate_affinity)
from rlfast.utils.launching.variant import (VariantLevel, load_variant, make_random_variants,
                                            make_variants, save_variant, update_config)

__all__ = ["encode_affinity", "make_affinity", "affinity_from_code", "get_n_run_slots",
           "prepend_run_slot", "validate_affinity", "VariantLevel", "make_variants",
           "make_random_variants", "update_config", "load_variant", "save_variant",
           "run_experiments", "launch_experiment"]

NEW_PACKAGE = "rlfast.launching"
# Names of the launcher that moved to rlfast.launching, served from there on first use.
MOVED_NAMES = frozenset({
    "run_experiments", "launch_experiment", "experiment_command", "RunResult", "report_sweep",
    "stop_children", "kill_after_grace", "write_atomic", "TERMINATE_GRACE_S",
    "NUM_LAUNCHED_FILE", "TREE_FILE"})
# Old submodule -> the module that replaces it (submitit's pickled jobs name slurm_job.SweepRun).
MOVED_MODULES = {"exp_launcher": NEW_PACKAGE, "slurm": f"{NEW_PACKAGE}.slurm",
                 "slurm_job": f"{NEW_PACKAGE}.slurm_job"}


def _warn_moved(old: str, new: str, stacklevel: int) -> None:
    warnings.warn(f"{old} has moved to {new}; import it from there (the old path is "
                  f"deprecated and will be removed).", DeprecationWarning,
                  stacklevel=stacklevel + 1)


def __getattr__(name: str) -> Any:
    """The moved launcher names, imported from :mod:`rlfast.launching` when first asked for."""
    if name in MOVED_NAMES:
        _warn_moved(f"{__name__}.{name}", f"{NEW_PACKAGE}.{name}", stacklevel=2)
        return getattr(importlib.import_module(NEW_PACKAGE), name)
    if name in MOVED_MODULES:
        _warn_moved(f"{__name__}.{name}", MOVED_MODULES[name], stacklevel=2)
        return _alias_module(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _alias_module(name: str) -> types.ModuleType:
    """The module that replaced the old submodule ``name``, registered under its old name
    (in ``sys.modules`` and as this package's attribute, as an import of a submodule does)."""
    module = importlib.import_module(MOVED_MODULES[name])
    sys.modules[f"{__name__}.{name}"] = module
    globals()[name] = module
    return module


class _MovedModuleAlias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Makes ``import rlfast.utils.launching.exp_launcher`` (``.slurm``, ``.slurm_job``) give
    the module that replaced it, registered under the old name too (the import system
    lets a loader replace its module in ``sys.modules``), with a DeprecationWarning."""

    def find_spec(self, fullname: str, path: Any = None,
                  target: Any = None) -> importlib.machinery.ModuleSpec | None:
        package, _, name = fullname.rpartition(".")
        if package != __name__ or name not in MOVED_MODULES:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None  # a placeholder module, replaced in exec_module

    def exec_module(self, module: types.ModuleType) -> None:
        name = module.__name__.rpartition(".")[2]
        _warn_moved(module.__name__, MOVED_MODULES[name], stacklevel=2)  # skips importlib
        _alias_module(name)


if not any(isinstance(finder, _MovedModuleAlias) for finder in sys.meta_path):
    sys.meta_path.append(_MovedModuleAlias())
