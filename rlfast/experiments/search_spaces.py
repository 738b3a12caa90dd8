"""Hyperparameter search spaces for ``rlfast tune``, one per algorithm preset.

``SEARCH_SPACES[algo]`` maps dotted config keys (as ``--set`` takes them) to a distribution
spec, in the notation of ``rlfast.launching.make_random_variants``:

* a list: choose one of its values (``[0.98, 0.99, 0.995]``);
* ``("uniform", low, high)`` and ``("loguniform", low, high)``: a float in [low, high];
* ``("int", low, high)`` and ``("intlog", low, high)``: an int in [low, high], inclusive
  (``intlog`` uniform in log space).

Every key exists in the algorithm's preset for each action family it supports (checked by
tests/experiments/test_tune.py). The ranges are anchored on rl-baselines3-zoo's
``rl_zoo3/hyperparams_opt.py`` (its ``sample_<algo>_params`` functions, cited as "zoo"
below), mapped to rlfast's names and narrowed where the zoo's range is meant for budgets
far beyond a tuning trial's; each comment says which.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rlfast.experiments.config import ConfigError, flatten_unique, unknown_key_error

__all__ = ["SEARCH_SPACES", "DISTRIBUTIONS", "check_space", "suggest", "spec_contains",
           "space_from_json", "space_to_json", "enqueue_params"]

DISTRIBUTIONS = ("uniform", "loguniform", "int", "intlog")

_DISCOUNT = [0.98, 0.99, 0.995]  # zoo: gamma in 1 - [1e-4, 0.03] (log); the usual middle
_QPG_DISCOUNT = [0.95, 0.98, 0.99, 0.995]  # zoo (sac, td3): [0.9, ..., 0.9999]; the middle
_QPG_BATCH = [64, 128, 256, 512]  # zoo (sac, td3): batch_size [16, ..., 2048]; the middle
_QPG_TAU = [0.001, 0.005, 0.01, 0.02, 0.05]  # zoo (sac, td3): tau [0.001, ..., 0.08]
# zoo (sac): learning_starts [0, 1000, 10000, 20000]; 20k would be a whole Pendulum trial.
_QPG_START = [1000, 5000, 10000]

SEARCH_SPACES: dict[str, dict[str, Any]] = {
    "ppo": {
        # zoo: learning_rate 1e-5..2e-3 (log, SB3's constant rate); rlfast's PPO decays the
        # rate linearly to 0, so its useful initial rates sit higher: 1e-4..1e-2.
        "algo.learning_rate": ("loguniform", 1e-4, 1e-2),
        "algo.discount": _DISCOUNT,
        # zoo: gae_lambda in 1 - [1e-4, 0.1] (log): 0.9 ... 0.9999.
        "algo.gae_lambda": [0.9, 0.95, 0.98],
        # zoo: n_epochs [1, 5, 10, 20]; 3..10 covers the published PPO settings.
        "algo.epochs": ("int", 3, 10),
        # zoo: batch_size [32, ..., 512] per n_steps * n_envs; here as a number of minibatches.
        "algo.minibatches": [2, 4, 8],
        # zoo: ent_coef 1e-8..0.1 (log); below 1e-5 the bonus is indistinguishable from 0.
        "algo.entropy_loss_coeff": ("loguniform", 1e-5, 1e-2),
        # zoo: clip_range [0.1, 0.2, 0.3, 0.4].
        "algo.ratio_clip": [0.1, 0.2, 0.3],
        # zoo: n_steps [32, ..., 2048] per environment; the short end, for short trials.
        "sampler.batch_T": [32, 64, 128],
    },
    "a2c": {
        # zoo: learning_rate 1e-5..2e-3 (log); rlfast's A2C presets use 7e-4 and 1e-3.
        "algo.learning_rate": ("loguniform", 1e-4, 3e-3),
        "algo.discount": _DISCOUNT,
        # zoo: gae_lambda in 1 - [1e-4, 0.1] (log); 1.0 is the preset's plain n-step return.
        "algo.gae_lambda": [0.9, 0.95, 0.98, 1.0],
        # zoo: ent_coef 1e-8..0.1 (log), narrowed as for ppo.
        "algo.entropy_loss_coeff": ("loguniform", 1e-5, 1e-2),
        # zoo: max_grad_norm uniform 0.3..2.
        "algo.clip_grad_norm": ("uniform", 0.3, 2.0),
        # zoo (earlier releases): vf_coef uniform 0..1; 0 would leave the critic untrained.
        "algo.value_loss_coeff": ("uniform", 0.2, 1.0),
        # zoo: n_steps [32, ..., 2048] per environment; A2C's classic 5 and up, for short trials.
        "sampler.batch_T": [5, 8, 16, 32],
    },
    "dqn": {
        # zoo: learning_rate 1e-5..1 (log); the stable part for Adam on small MLPs.
        "algo.learning_rate": ("loguniform", 1e-4, 3e-3),
        "algo.discount": _DISCOUNT,
        # zoo: batch_size [16, 32, 64, 100, 128, 256, 512].
        "algo.batch_size": [32, 64, 128, 256],
        # zoo: target_update_interval [1, 1000, ..., 20000] environment steps; rlfast counts
        # it in updates (replay_ratio 8 and batch 64: about 8 steps per update).
        "algo.target_update_interval": [100, 250, 500, 1000],
        # zoo: exploration_fraction uniform 0..0.5 of the run; here the decay length in steps.
        "algo.eps_steps": ("intlog", 5_000, 50_000),
        # zoo: exploration_final_eps uniform 0..0.2.
        "agent.eps_final": ("uniform", 0.0, 0.1),
        # not in zoo's DQN sampler; 1 (plain DQN) to the preset's 10 (rainbow uses 3).
        "algo.n_step_return": [1, 3, 5, 10],
    },
    "sac": {
        # zoo: learning_rate 1e-5..1 (log); the stable part for Adam.
        "algo.learning_rate": ("loguniform", 1e-4, 3e-3),
        "algo.discount": _QPG_DISCOUNT,
        "algo.batch_size": _QPG_BATCH,
        "algo.target_update_tau": _QPG_TAU,
        "algo.min_steps_learn": _QPG_START,
    },
    "td3": {
        # zoo: one learning_rate 1e-5..1 (log) for both networks; rlfast has one per network.
        "algo.mu_learning_rate": ("loguniform", 1e-4, 3e-3),
        "algo.q_learning_rate": ("loguniform", 1e-4, 3e-3),
        "algo.discount": _QPG_DISCOUNT,
        "algo.batch_size": _QPG_BATCH,
        "algo.target_update_tau": _QPG_TAU,
        "algo.min_steps_learn": _QPG_START,
        # zoo: noise_std uniform 0..1 (on actions scaled to [-1, 1]); 0 explores nothing.
        "agent.action_std": ("uniform", 0.05, 0.5),
    },
    "ddpg": {
        # As td3 (zoo's DDPG sampler is its TD3 sampler).
        "algo.learning_rate": ("loguniform", 1e-4, 3e-3),
        "algo.q_learning_rate": ("loguniform", 1e-4, 3e-3),
        "algo.discount": _QPG_DISCOUNT,
        "algo.batch_size": _QPG_BATCH,
        "algo.target_update_tau": _QPG_TAU,
        "algo.min_steps_learn": _QPG_START,
        "agent.action_std": ("uniform", 0.05, 0.5),
    },
}


def check_space(space: Mapping[str, Any], where: str = "search space") -> None:
    """Raise ValueError for a spec that is not a non-empty list of choices (each None, bool,
    int, float or str) or a ``(distribution, low, high)`` triple with low <= high (low > 0
    for the log ones, ints for the int ones)."""
    for key, spec in space.items():
        if isinstance(spec, list):
            if not spec:
                raise ValueError(f"{where}: {key} has an empty list of choices")
            bad = [c for c in spec if c is not None and not isinstance(c, (bool, int, float, str))]
            if bad:
                raise ValueError(f"{where}: {key} choices must be numbers, strings, booleans "
                                 f"or null; got {bad!r}")
            continue
        if not (isinstance(spec, tuple) and len(spec) == 3 and spec[0] in DISTRIBUTIONS):
            raise ValueError(f"{where}: {key} = {spec!r}; expected a list of choices or "
                             f"(distribution, low, high) with distribution one of "
                             f"{', '.join(DISTRIBUTIONS)}")
        kind, low, high = spec
        numbers = (int,) if kind in ("int", "intlog") else (int, float)
        if any(isinstance(v, bool) or not isinstance(v, numbers) for v in (low, high)):
            what = "integers" if kind in ("int", "intlog") else "numbers"
            raise ValueError(f"{where}: {key} = {spec!r}; low and high must be {what}")
        if low > high:
            raise ValueError(f"{where}: {key} = {spec!r}; low must not exceed high")
        if kind in ("loguniform", "intlog") and low <= 0:
            raise ValueError(f"{where}: {key} = {spec!r}; a log scale needs low > 0")


def suggest(trial: Any, key: str, spec: Any) -> Any:
    """Sample ``spec`` for config ``key`` with an Optuna trial (the parameter is named by
    the key): ``suggest_categorical``, ``suggest_float`` or ``suggest_int``."""
    if isinstance(spec, list):
        return trial.suggest_categorical(key, spec)
    kind, low, high = spec
    if kind in ("int", "intlog"):
        return trial.suggest_int(key, low, high, log=kind == "intlog")
    return trial.suggest_float(key, float(low), float(high), log=kind == "loguniform")


def spec_contains(spec: Any, value: Any) -> bool:
    """Whether ``spec`` can produce ``value`` (numbers compare by value, booleans and
    strings only with their own kind)."""
    def is_number(v: Any) -> bool:
        return isinstance(v, (int, float)) and not isinstance(v, bool)

    if isinstance(spec, list):
        return any(value == c and (type(value) is type(c) or is_number(value) and is_number(c))
                   for c in spec)
    kind, low, high = spec
    if not is_number(value):
        return False
    if kind in ("int", "intlog") and not float(value).is_integer():
        return False
    return low <= value <= high


def space_from_json(data: Any, where: str = "search space") -> dict[str, Any]:
    """A space read from JSON, where tuples are lists: ``[name, low, high]`` with ``name``
    one of ``DISTRIBUTIONS`` is a distribution, any other list a list of choices. Checked
    by ``check_space`` (``ConfigError`` naming ``where``)."""
    if not isinstance(data, dict) or not data:
        raise ConfigError(f"{where}: expected a non-empty JSON object of config keys")
    space = {}
    for key, spec in data.items():
        if (isinstance(spec, list) and len(spec) == 3 and isinstance(spec[0], str)
                and spec[0] in DISTRIBUTIONS):
            spec = tuple(spec)
        space[key] = spec
    try:
        check_space(space, where)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    return space


def space_to_json(space: Mapping[str, Any]) -> dict[str, list]:
    """The inverse of ``space_from_json``: every spec as a list."""
    return {key: list(spec) for key, spec in space.items()}


def enqueue_params(data: Any, space: Mapping[str, Any], valid: Mapping[str, Any],
                   where: str) -> list[dict]:
    """The trials to evaluate first, from JSON ``data``: one object or a list of them,
    nested or dotted like a ``--config`` file (a ``best_config.json`` works). Keys must be
    config keys (``valid``); those outside ``space`` are fixed settings and dropped; values
    must lie in the space (``ConfigError`` naming ``where`` otherwise)."""
    entries = data if isinstance(data, list) else [data]
    out = []
    for entry in entries:
        params = {}
        for key, value in flatten_unique(entry, where).items():
            if key not in valid:
                raise unknown_key_error(key, valid)
            if key not in space:
                continue
            if not spec_contains(space[key], value):
                raise ConfigError(f"{where}: {key} = {value!r} is outside the search space "
                                  f"{space_to_json(space)[key]!r}")
            params[key] = value
        if params:
            out.append(params)
    return out
