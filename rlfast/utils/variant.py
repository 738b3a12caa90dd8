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
import math
import numbers
import os
import re
from collections import namedtuple
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from rlfast.utils.misc import deep_merge

__all__ = ["VariantLevel", "make_variants", "make_random_variants", "update_config",
           "load_variant", "save_variant", "VARIANT_FILE"]

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


_RANDOM_KINDS = ("uniform", "loguniform", "int", "intlog")


def _random_key_path(key: Any) -> tuple:
    """A key of ``make_random_variants``'s space as a key path: tuples as VariantLevel takes
    them, strings split on dots ("algo.learning_rate" -> ("algo", "learning_rate"))."""
    if isinstance(key, str):
        path = tuple(key.split("."))
    else:
        path = tuple(key) if isinstance(key, tuple) else ()
    if not path or any(part == "" for part in path):
        raise ValueError(f"make_random_variants space keys must be non-empty key paths: a "
                         f"dotted string like 'algo.learning_rate' or a tuple like ('algo', "
                         f"'learning_rate'); got {key!r}")
    return path


def _check_random_spec(name: str, spec: Any) -> None:
    """Refuse a distribution spec ``make_random_variants`` cannot sample, naming the key."""
    kinds = f"a non-empty list of choices, or a tuple (kind, low, high) with kind in " \
            f"{list(_RANDOM_KINDS)}"
    if isinstance(spec, list):
        if not spec:
            raise ValueError(f"Random variant key {name!r}: the list of choices is empty; give "
                             f"{kinds}.")
        return
    if not (isinstance(spec, tuple) and len(spec) == 3 and spec[0] in _RANDOM_KINDS):
        raise ValueError(f"Random variant key {name!r} has spec {spec!r}; give {kinds}.")
    kind, low, high = spec
    integral = kind in ("int", "intlog")
    number_type = numbers.Integral if integral else numbers.Real
    for bound in (low, high):
        if isinstance(bound, bool) or not isinstance(bound, number_type) \
                or not math.isfinite(bound):
            raise ValueError(f"Random variant key {name!r}: {kind} bounds must be finite "
                             f"{'integers' if integral else 'numbers'}; got {spec!r}.")
    if not low < high:
        raise ValueError(f"Random variant key {name!r}: {kind} needs low < high; got {spec!r}.")
    if kind in ("loguniform", "intlog") and not low > 0:
        raise ValueError(f"Random variant key {name!r}: {kind} needs low > 0; got {spec!r}.")


def _sample_random_spec(spec: Any, rng: np.random.Generator) -> Any:
    if isinstance(spec, list):
        return spec[int(rng.integers(len(spec)))]
    kind, low, high = spec
    if kind == "uniform":
        return float(rng.uniform(low, high))
    if kind == "loguniform":  # log x ~ U(log low, log high)
        return float(min(max(math.exp(rng.uniform(math.log(low), math.log(high))), low), high))
    if kind == "int":
        return int(rng.integers(low, high + 1))
    # intlog: floor(x), log x ~ U(log low, log(high + 1)): P(k) = log((k+1)/k) / log((high+1)/low)
    value = math.floor(math.exp(rng.uniform(math.log(low), math.log(high + 1))))
    return int(min(max(value, low), high))


def _dir_value(value: Any) -> str:
    """A sampled value as a short directory-name fragment."""
    if isinstance(value, float):
        return f"{value:.3g}"
    if isinstance(value, numbers.Integral):
        return str(value)
    return re.sub(r"[^A-Za-z0-9.+-]+", "-", str(value)).strip("-") or "none"


def make_random_variants(space: Mapping, n: int, seed: int | None
                         ) -> tuple[list[dict], list[str]]:
    """Random search without Optuna: draw ``n`` variants from ``space``; return
    ``(variants, log_dirs)`` like :func:`make_variants`, so that a launch script passes them
    to ``run_experiments`` the same way.

    ``space`` maps key paths (a tuple, as in ``VariantLevel``, or a dotted string:
    ``"algo.learning_rate"`` is ``("algo", "learning_rate")``) to a distribution: a list of
    choices (uniform choice), ``("uniform", low, high)``, ``("loguniform", low, high)``
    (log-uniform, ``low > 0``), ``("int", low, high)`` (uniform integer, both ends included)
    or ``("intlog", low, high)`` (integer, ``low > 0``, both ends included, each octave equally
    likely: ``floor(x)`` with ``log x`` uniform on ``[log low, log(high + 1))``); ``low <
    high`` always. Each variant is a nested dict holding the sampled keys, built as
    ``make_variants`` builds its own; its log dir names the index (zero-padded, which makes it
    unique) and each sampled value under its last key, e.g.
    ``03_learning_rate_0.000312_clip_0.2``. The draws are deterministic for a given ``seed``
    (``np.random.default_rng(seed)``; keys sampled in ``space``'s order, variant after
    variant); ``None`` draws fresh entropy.
    """
    if not isinstance(space, Mapping) or not space:
        raise ValueError(f"make_random_variants needs a non-empty dict from key paths to "
                         f"distributions; got {space!r}")
    if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 1:
        raise ValueError(f"make_random_variants needs n >= 1 (an integer); got {n!r}")
    paths = []
    for key, spec in space.items():
        path = _random_key_path(key)
        _check_random_spec(".".join(map(str, path)), spec)
        for other in paths:
            shorter, longer = sorted((other, path), key=len)
            if longer[:len(shorter)] == shorter:
                raise ValueError(f"make_random_variants space keys {other} and {path} overlap: "
                                 "one is the other or lies inside it.")
        paths.append(path)
    rng = np.random.default_rng(seed)
    width = len(str(n - 1))
    variants, log_dirs = [], []
    for index in range(n):
        variant: dict = {}
        parts = [f"{index:0{width}d}"]
        for path, spec in zip(paths, space.values()):
            value = _sample_random_spec(spec, rng)
            _set_path(variant, path, value)
            parts.append(f"{path[-1]}_{_dir_value(value)}")
        variants.append(variant)
        log_dirs.append("_".join(parts))
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
