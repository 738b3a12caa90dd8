"""Nested experiment configurations and ``--set KEY=VALUE`` overrides checked against them."""
from __future__ import annotations

import ast
import copy
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


def apply_overrides(config: dict, overrides: list[str]) -> dict:
    """Return a copy of ``config`` with each ``dotted.key=value`` applied.

    Keys must already exist in the config (unknown keys list the valid ones); values are
    converted to the default's type.
    """
    config = copy.deepcopy(config)
    valid = flatten(config)
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"--set expects KEY=VALUE, got {item!r}")
        key, text = item.split("=", 1)
        key = key.strip()
        if key not in valid:
            listing = "\n  ".join(sorted(valid))
            raise ConfigError(f"unknown config key {key!r}. Valid keys:\n  {listing}")
        value = convert_value(text, valid[key], key)
        node = config
        *parents, leaf = key.split(".")
        for part in parents:
            node = node[part]
        node[leaf] = value
    return config
