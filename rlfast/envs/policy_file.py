"""A trained policy as a fixed opponent: the TorchScript file ``rlfast export --format
torchscript`` writes, played in the environment's own process.

``rlfast export RUN --format torchscript`` traces the run's evaluation-mode policy (greedy:
the most probable action, or the largest Q-value) into one file, with a small JSON record
beside the graph (:data:`POLICY_INFO_FILE`: the run's env id, the players it learned as,
whether it is recurrent). :class:`PolicyFileOpponent` loads that file once per process and
acts for the players of :class:`rlfast.envs.opponents.OpponentParallelEnv` that do not learn;
:func:`read_policy_info` reads the record so that a run can check, before it starts, that the
opponent learned the game and the role it is asked to play.
"""
from __future__ import annotations

import json
import os
from typing import Any

import numpy as np
import torch

__all__ = ["POLICY_INFO_FILE", "PolicyFileError", "read_policy_info", "PolicyFileOpponent"]

POLICY_INFO_FILE = "rlfast.json"


class PolicyFileError(ValueError):
    """A policy file that cannot be an opponent: unreadable, not TorchScript, or without
    rlfast's record."""


def _load(path: str, extra: dict | None = None) -> Any:
    try:
        return torch.jit.load(path, map_location="cpu", _extra_files=extra or {})
    except (RuntimeError, ValueError, OSError) as e:
        raise PolicyFileError(f"{path} is not a TorchScript policy file written by rlfast "
                              f"export --format torchscript ({str(e).splitlines()[0]})") from None


def read_policy_info(path: str | os.PathLike) -> dict:
    """The record ``rlfast export`` wrote into the TorchScript file ``path`` (see the module
    docstring); a file without one, or not a TorchScript file, is a :class:`PolicyFileError`."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise PolicyFileError(f"{path} is not a file")
    extra = {POLICY_INFO_FILE: ""}
    _load(path, extra)
    text = extra[POLICY_INFO_FILE]
    if not text:
        raise PolicyFileError(f"{path} holds no {POLICY_INFO_FILE} record: export the run "
                              f"again with this version of rlfast export")
    return json.loads(text)


class PolicyFileOpponent:
    """Plays the policy in the TorchScript file ``path`` (feed-forward graphs: observation
    in, action out). The graph is loaded at the first action, in the process that steps the
    environment; a pickled or copied opponent carries only its path."""

    def __init__(self, path: str | os.PathLike):
        self.path = os.fspath(path)
        self._graph: Any = None

    def __getstate__(self) -> dict:
        return dict(path=self.path)

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["path"])

    def __deepcopy__(self, memo: dict) -> PolicyFileOpponent:
        return PolicyFileOpponent(self.path)

    def reset(self, seed: int | None) -> None:
        """Nothing to reset: a feed-forward greedy policy has no state and no randomness."""

    def act(self, player: str, observation: Any, action_space: Any) -> Any:
        if self._graph is None:
            self._graph = _load(self.path)
        with torch.no_grad():
            out = self._graph(torch.from_numpy(np.asarray(observation)[None]))
        action = (out[0] if isinstance(out, (tuple, list)) else out)[0].numpy()
        return int(action) if action.ndim == 0 else action

    def __repr__(self) -> str:
        return f"PolicyFileOpponent({self.path!r})"
