"""Sampler base class: configuration shared by the serial and parallel samplers."""
from __future__ import annotations

import functools
import math

from rlfast.samplers.collections import BatchSpec, TrajInfo


def make_envs(EnvCls, n: int, env_kwargs: dict, seed: int | None, first_rank: int) -> list:
    """``n`` environments; env ``i`` is seeded ``seed + first_rank + i`` when seeded."""
    envs = [EnvCls(**env_kwargs) for _ in range(n)]
    if seed is not None:
        for i, env in enumerate(envs):
            if hasattr(env, "seed"):
                env.seed(int(seed) + first_rank + i)
    return envs


class BaseSampler:
    """Holds the environment factory, batch dimensions, collector classes and eval settings.

    Evaluation runs ``eval_n_envs`` environments for at most ``eval_max_steps`` total steps,
    stopping early once ``eval_max_trajectories`` have completed.
    """

    mid_batch_reset = True

    def __init__(self, EnvCls, env_kwargs: dict, batch_T: int, batch_B: int, CollectorCls,
                 max_decorrelation_steps: int = 100, TrajInfoCls=TrajInfo, eval_n_envs: int = 0,
                 eval_CollectorCls=None, eval_env_kwargs: dict | None = None,
                 eval_max_steps: int | None = None, eval_max_trajectories: int | None = None):
        if int(batch_T) < 1 or int(batch_B) < 1:
            raise ValueError(f"batch_T and batch_B must be >= 1; got batch_T={batch_T}, batch_B={batch_B}")
        if eval_n_envs and eval_max_steps is None:
            raise ValueError("eval_n_envs > 0 needs eval_max_steps (total evaluation step budget)")
        self.EnvCls = EnvCls
        self.env_kwargs = dict(env_kwargs)
        self.batch_spec = BatchSpec(int(batch_T), int(batch_B))
        self.CollectorCls = CollectorCls
        self.mid_batch_reset = CollectorCls.mid_batch_reset
        self.max_decorrelation_steps = int(max_decorrelation_steps)
        self.TrajInfoCls = TrajInfoCls
        self.eval_n_envs = int(eval_n_envs)
        self.eval_CollectorCls = eval_CollectorCls
        self.eval_env_kwargs = dict(eval_env_kwargs) if eval_env_kwargs is not None else dict(env_kwargs)
        self.eval_max_steps = None if eval_max_steps is None else int(eval_max_steps)
        self.eval_max_trajectories = None if eval_max_trajectories is None else int(eval_max_trajectories)

    def eval_max_T(self, n_envs: int) -> int:
        return max(1, math.ceil(self.eval_max_steps / max(n_envs, 1)))

    def apply_traj_info_kwargs(self, traj_info_kwargs: dict | None) -> None:
        """Bind trajectory settings (e.g. ``discount``) as ``_<name>`` constructor arguments of
        this sampler's TrajInfo class; the class itself is left untouched."""
        if traj_info_kwargs:
            self.TrajInfoCls = functools.partial(
                self.TrajInfoCls, **{"_" + k: v for k, v in traj_info_kwargs.items()})

    def initialize(self, *args, **kwargs):
        raise TypeError(f"{type(self).__name__} must define initialize()")

    def obtain_samples(self, itr: int):
        raise TypeError(f"{type(self).__name__} must define obtain_samples()")

    def evaluate_agent(self, itr: int):
        raise TypeError(f"{type(self).__name__} must define evaluate_agent()")

    def shutdown(self) -> None:
        pass

    @property
    def batch_size(self) -> int:
        return self.batch_spec.size
