"""``rlfast.launching`` is the one launching package: it re-exports the affinity-code and
variant helpers, which live in ``rlfast.utils`` so that the runners (a layer below the
launcher) can use them, and the old ``rlfast.utils.launching`` package is gone."""
import importlib

import pytest

import rlfast.launching
from rlfast.utils import affinity, variant

AFFINITY_NAMES = ("encode_affinity", "make_affinity", "affinity_from_code", "get_n_run_slots",
                  "prepend_run_slot", "validate_affinity")
VARIANT_NAMES = ("VariantLevel", "make_variants", "make_random_variants", "update_config",
                 "load_variant", "save_variant")


@pytest.mark.parametrize("module,name", [(affinity, n) for n in AFFINITY_NAMES]
                         + [(variant, n) for n in VARIANT_NAMES])
def test_the_launching_package_reexports_the_utils_objects(module, name):
    assert getattr(rlfast.launching, name) is getattr(module, name)
    assert name in rlfast.launching.__all__


def test_every_exported_name_exists():
    missing = [n for n in rlfast.launching.__all__ if not hasattr(rlfast.launching, n)]
    assert not missing, f"rlfast.launching.__all__ names missing attributes: {missing}"


def test_the_old_package_is_gone():
    with pytest.raises(ModuleNotFoundError, match="rlfast.utils.launching"):
        importlib.import_module("rlfast.utils.launching")
