"""Environment spaces the agent tests build their models from, made once per test session."""
from __future__ import annotations

import functools

import pytest

_GYM_IDS = {"cartpole": "CartPole-v1", "pendulum": "Pendulum-v1"}


@functools.lru_cache(maxsize=None)
def spaces_of(key: str):
    """The spaces of ``"pong"`` (rlfast's AtariEnv; skips without ale_py), ``"cartpole"`` or
    ``"pendulum"``."""
    if key == "pong":
        pytest.importorskip("ale_py")
        from rlfast.envs import AtariEnv
        env = AtariEnv(game="pong")
        try:
            return env.spaces
        finally:
            env.close()
    from rlfast.envs import make
    return make(_GYM_IDS[key]).spaces
