"""Nested experiment configurations, and the overrides checked against them: ``--set
KEY=VALUE`` strings and ``--config FILE`` JSON files (values keep their JSON types)."""
from __future__ import annotations

import ast
import copy
import difflib
import json
import os
from collections.abc import Iterable, Mapping
from typing import Any


class ConfigError(ValueError):
    """A configuration override names an unknown key or carries an unusable value."""


def flatten(config: dict, prefix: str = "") -> dict:
    """{'algo': {'lr': 1}} -> {'algo.lr': 1} (dicts recurse; everything else is a leaf)."""
    out = {}
    for key, value in config.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(flatten(value, path + "."))
        else:
            out[path] = value
    return out


def convert_value(text: str, default: Any, key: str) -> Any:
    """Parse ``text`` to the type of ``default`` (bool, int, float, str, list/tuple, None)."""
    try:
        if isinstance(default, bool):
            lowered = text.strip().lower()
            if lowered in ("1", "true", "yes", "on"):
                return True
            if lowered in ("0", "false", "no", "off"):
                return False
            raise ValueError(f"not a boolean: {text!r}")
        if isinstance(default, int):
            number = float(text)
            if not number.is_integer():
                raise ValueError(f"not an integer: {text!r}")
            return int(number)
        if isinstance(default, float):
            return float(text)
        if isinstance(default, str):
            return text
        value = ast.literal_eval(text)
        if isinstance(default, (list, tuple)) and not isinstance(value, (list, tuple)):
            raise ValueError(f"expected a list such as [64, 64], got {text!r}")
        return type(default)(value) if isinstance(default, (list, tuple)) else value
    except (ValueError, SyntaxError) as e:
        if default is None:
            return text  # a free-form value for a key whose default is None
        raise ConfigError(f"--set {key}={text}: cannot convert to "
                          f"{type(default).__name__} ({e})") from None


def _close_keys(key: str, valid: Iterable[str], n: int = 3) -> list[str]:
    """Up to ``n`` valid keys that ``key`` was most likely meant to be, best first: scored by
    how alike their last parts are (``difflib``), so a key in the wrong section
    (``sampler.learning_rate`` -> ``algo.learning_rate``) or without one (``batch_T``) is found,
    with a small bonus for the same section; only those nearly as close as the best."""
    section, _, leaf = key.rpartition(".")
    scores = {}
    for candidate in valid:
        cand_section, _, cand_leaf = candidate.rpartition(".")
        score = difflib.SequenceMatcher(None, leaf, cand_leaf).ratio()
        scores[candidate] = score + (0.05 if section and section == cand_section else 0.0)
    ranked = sorted((k for k in scores if scores[k] >= 0.75 and k != key),
                    key=lambda k: (-scores[k], k))
    return [k for k in ranked if scores[k] >= scores[ranked[0]] - 0.1][:n]


def unknown_key_error(key: str, valid: Mapping[str, Any]) -> ConfigError:
    """The error for a key that is not in the config: its first line names the closest
    valid keys (the line a launcher's failure report and a reader's eye catch), the second
    lists every valid key on one line, so a typo costs two lines of output, not forty."""
    close = _close_keys(key, valid)
    if close:
        hint = "did you mean " + " or ".join(repr(k) for k in close) + "?"
    else:
        hint = "no valid key is close to it."
    return ConfigError(f"unknown config key {key!r}; {hint}\n"
                       f"Valid keys: {', '.join(sorted(valid))}")


# Other names for keys: the memory core is a model setting that the agent section carries.
KEY_ALIASES = {"model.core": "agent.core", "model.memory_len": "agent.memory_len",
               "model.core_size": "agent.core_size"}


def _apply(config: dict, items: Iterable[tuple[str, Any]], convert: Any) -> dict:
    """A copy of ``config`` with ``convert(raw, default, key)`` set at each dotted ``key``:
    the one path that ``--set`` and ``--config`` share, so both check keys alike."""
    config = copy.deepcopy(config)
    valid = flatten(config)
    for key, raw in items:
        key = KEY_ALIASES.get(key, key)
        if key not in valid:
            raise unknown_key_error(key, valid)
        value = convert(raw, valid[key], key)
        node = config
        *parents, leaf = key.split(".")
        for part in parents:
            node = node[part]
        node[leaf] = value
    return config


def apply_overrides(config: dict, overrides: list[str]) -> dict:
    """Return a copy of ``config`` with each ``dotted.key=value`` applied.

    Keys must already exist in the config (unknown keys list the valid ones); values are
    converted to the default's type.
    """
    items = []
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"--set expects KEY=VALUE, got {item!r}")
        key, text = item.split("=", 1)
        items.append((key.strip(), text))
    return _apply(config, items, convert_value)


def coerce_value(value: Any, default: Any, key: str, source: str = "--config") -> Any:
    """Check a typed (JSON) ``value`` against the type of ``default`` and return it in that
    type: an int (not a bool) is accepted for a float, an integral float for an int, a list
    for a list or tuple; a ``None`` default accepts anything. ``source`` names the origin
    in the error."""
    def bad(expected: str) -> ConfigError:
        return ConfigError(f"{source}: {key} = {value!r} ({type(value).__name__}); expected "
                           f"{expected} like the default {default!r}")

    if default is None:
        return value
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise bad("true or false")
        return value
    if isinstance(default, int):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise bad("an integer")
        if isinstance(value, float) and not value.is_integer():
            raise bad("an integer")
        return int(value)
    if isinstance(default, float):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise bad("a number")
        return float(value)
    if isinstance(default, str):
        if not isinstance(value, str):
            raise bad("a string")
        return value
    if isinstance(default, (list, tuple)):
        if not isinstance(value, (list, tuple)):
            raise bad("a list")
        return type(default)(value)
    if isinstance(default, dict):
        if not isinstance(value, dict):
            raise bad("an object")
        return dict(value)
    return value


def apply_config_values(config: dict, values: Mapping[str, Any], source: str = "--config") -> dict:
    """Return a copy of ``config`` with each ``{dotted.key: value}`` of ``values`` applied
    (as ``load_config_file`` returns them). Keys are checked as for ``--set`` (an unknown
    key lists the valid ones); values must fit the default's type (``coerce_value``)."""
    return _apply(config, values.items(),
                  lambda raw, default, key: coerce_value(raw, default, key, source))


def nest(flat: Mapping[str, Any]) -> dict:
    """{'algo.lr': 1} -> {'algo': {'lr': 1}}: the inverse of ``flatten``."""
    out: dict = {}
    for key, value in flat.items():
        node = out
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return out


def read_json(path: str | os.PathLike, option: str = "--config") -> Any:
    """The JSON value in the file ``path``; a missing, unreadable or unparsable file is a
    ``ConfigError`` that names ``option`` and the path."""
    path = os.fspath(path)
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        raise ConfigError(f"{option} {path}: no such file") from None
    except OSError as e:
        raise ConfigError(f"{option} {path}: cannot read it ({e.strerror or e})") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(f"{option} {path}: not valid JSON ({e})") from None


def load_config_file(path: str | os.PathLike) -> dict:
    """Read a ``--config`` JSON file into flat ``{dotted.key: value}`` overrides.

    The file holds one JSON object, nested like a preset (``{"algo": {"learning_rate":
    0.001}}``), keyed by dotted paths (``{"algo.learning_rate": 0.001}``), or both mixed;
    nested objects are flattened (an empty object stays a value). A missing, unreadable or
    unparsable file, a top level that is not an object, or one key given twice (nested and
    dotted) is a ``ConfigError`` naming the path. Keys and value types are checked against
    a config by ``apply_config_values``.
    """
    data = read_json(path)
    return flatten_unique(data, f"--config {os.fspath(path)}")


def flatten_unique(data: Any, where: str) -> dict:
    """``flatten`` for user input: ``data`` must be a JSON object, and a key given twice
    (nested and dotted) is a ``ConfigError`` naming ``where``."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a JSON object of config keys, got "
                          f"{type(data).__name__}")
    flat: dict = {}
    _flatten_unique(data, "", flat, where)
    return flat


def _flatten_unique(data: Mapping, prefix: str, out: dict, where: str) -> None:
    for key, value in data.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            _flatten_unique(value, dotted + ".", out, where)
        elif dotted in out:
            raise ConfigError(f"{where}: {dotted} is given twice")
        else:
            out[dotted] = value
