"""Hyperparameter variants for sweeps: describe levels of settings, cross them, merge them.

A sweep is written as a sequence of ``VariantLevel`` s; each level lists key paths into the
configuration dict and, for each combination it offers, the values and a directory name.
``make_variants`` crosses the levels in order into nested ``variant`` dicts and matching log
directories; a training script merges its variant into the preset with ``update_config``,
which refuses keys the preset lacks so that a typo fails loudly instead of silently
training the default. ``save_variant`` / ``load_variant`` pass a variant from the launcher
to the training script through ``variant.json`` in the run's log directory.
"""
from __future__ import annotations

import copy
import json
import os
from collections import namedtuple
from collections.abc import Mapping, Sequence
from typing import Any

from rlfast.utils.misc import deep_merge

__all__ = ["VariantLevel", "make_variants", "update_config", "load_variant", "save_variant",
           "VARIANT_FILE"]

VARIANT_FILE = "variant.json"

_VariantLevelBase = namedtuple("VariantLevel", ["keys", "values", "dir_names"])


class VariantLevel(_VariantLevelBase):
    """One level of a sweep: ``keys`` (list of key-path tuples into the config), ``values``
    (list of complete value combinations, each a list with one value per key) and
    ``dir_names`` (one log sub-directory name per combination).

    Lengths are checked on construction, so a missing value or directory name is reported
    where the sweep is written rather than as a wrong run later. A key path given as a plain
    string is taken as a one-key path.
    """

    __slots__ = ()

    def __new__(cls, keys: Sequence, values: Sequence, dir_names: Sequence) -> "VariantLevel":
        keys = [(k,) if isinstance(k, str) else tuple(k) for k in keys]
        for key in keys:
            if len(key) == 0:
                raise ValueError("VariantLevel keys must be non-empty key paths; got an empty "
                                 "tuple.")
        values = [list(v) for v in values]
        dir_names = list(dir_names)
        if len(values) != len(dir_names):
            raise ValueError(f"VariantLevel needs one dir_name per values entry: got "
                             f"{len(values)} values entries and {len(dir_names)} dir_names "
                             f"({dir_names}).")
        for i, combo in enumerate(values):
            if len(combo) != len(keys):
                raise ValueError(f"VariantLevel values[{i}] = {combo} has {len(combo)} values "
                                 f"but there are {len(keys)} keys ({keys}); each values entry "
                                 "must give one value per key.")
        if len(set(dir_names)) != len(dir_names):
            raise ValueError(f"VariantLevel dir_names must be unique within a level; got "
                             f"{dir_names}.")
        return super().__new__(cls, keys, values, dir_names)


def _set_path(tree: dict, path: tuple, value: Any) -> None:
    node = tree
    for i, key in enumerate(path[:-1]):
        child = node.setdefault(key, {})
        if not isinstance(child, dict):
            raise ValueError(f"Key path {'.'.join(map(str, path))} goes through "
                             f"{'.'.join(map(str, path[:i + 1]))}, which an earlier key set "
                             f"to the non-dict value {child!r}.")
        node = child
    node[path[-1]] = copy.deepcopy(value)


def _cross_variants(prev_variants: list[dict], prev_log_dirs: list[str],
                    variant_level: VariantLevel) -> tuple[list[dict], list[str]]:
    """Pair every previous variant with every value combination of ``variant_level``."""
    variants, log_dirs = [], []
    for prev_variant, prev_dir in zip(prev_variants, prev_log_dirs):
        for combo, dir_name in zip(variant_level.values, variant_level.dir_names):
            variant = copy.deepcopy(prev_variant)
            for path, value in zip(variant_level.keys, combo):
                _set_path(variant, path, value)
            variants.append(variant)
            log_dirs.append(os.path.join(prev_dir, str(dir_name)) if prev_dir
                            else str(dir_name))
    return variants, log_dirs


def make_variants(*variant_levels: VariantLevel) -> tuple[list[dict], list[str]]:
    """Cross the levels in order; return ``(variants, log_dirs)``, equal-length lists.

    The first level varies slowest. Each variant is a nested dict holding only the swept
    keys; each log dir joins the levels' ``dir_names`` with ``os.path.join``. With two
    combinations in one level and three in the next there are six variants.
    """
    if not variant_levels:
        raise ValueError("make_variants needs at least one VariantLevel.")
    variants: list[dict] = [{}]
    log_dirs: list[str] = [""]
    for i, level in enumerate(variant_levels):
        if not isinstance(level, VariantLevel):
            raise TypeError(f"make_variants argument {i} must be a VariantLevel, got "
                            f"{type(level).__name__}.")
        variants, log_dirs = _cross_variants(variants, log_dirs, level)
    return variants, log_dirs


def update_config(default: Mapping, variant: Mapping) -> dict:
    """Return a new dict: ``default`` with every field set in ``variant`` replaced.

    Dicts are merged recursively, so a variant only needs the fields it changes; other
    values (lists included) replace the default whole. Neither input is modified. A variant
    key that ``default`` lacks raises ``KeyError`` naming its dotted path (e.g.
    ``algo.learnin_rate``) and the valid keys at that level.
    """
    if not isinstance(default, Mapping) or not isinstance(variant, Mapping):
        raise TypeError(f"update_config needs two dicts; got {type(default).__name__} and "
                        f"{type(variant).__name__}.")
    return deep_merge(default, variant, strict=True, label="Variant key")


def save_variant(variant: Mapping, log_dir: str | os.PathLike) -> str:
    """Write ``variant`` to ``<log_dir>/variant.json`` (creating ``log_dir``); return the
    file's path. The file is written whole or not at all (temporary file, then rename)."""
    log_dir = os.fspath(log_dir)
    os.makedirs(log_dir, exist_ok=True)
    path = os.path.join(log_dir, VARIANT_FILE)
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(variant, f, indent=2, sort_keys=True)
        f.write("\n")
    os.replace(tmp, path)
    return path


def load_variant(log_dir: str | os.PathLike) -> dict:
    """Read the variant saved in ``<log_dir>/variant.json``."""
    path = os.path.join(os.fspath(log_dir), VARIANT_FILE)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"No {VARIANT_FILE} in {os.fspath(log_dir)!r}; the launcher "
                                "writes one into each variant's log directory.")
    with open(path, "r", encoding="utf-8") as f:
        return json.load(f)
