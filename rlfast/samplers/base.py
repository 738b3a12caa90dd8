"""Sampler base class: configuration shared by the serial and parallel samplers."""
from __future__ import annotations

import abc
import functools
import math
from typing import Any, Callable

import numpy as np

from rlfast.agents.base import BaseAgent
from rlfast.agents.param_sharing import use_own_cpu_model
from rlfast.envs.multiagent import MultiAgentTrajInfo, agents_per_env

from rlfast.samplers.buffer import build_samples_buffer
from rlfast.samplers.collections import BatchSpec, Samples, TrajInfo
from rlfast.utils.checks import check_int
from rlfast.utils.collections import AttrDict
from rlfast.utils.finite import check_batch_finite

# Seed offsets shared by every sampler, so that serial and parallel runs with one seed use the
# same environment seeds: training env i gets ``seed + first_rank + i``; eval env k gets
# ``seed + EVAL_ENV_SEED_OFFSET + k``; the example env that sizes the buffers gets
# ``seed + EXAMPLE_ENV_SEED_OFFSET``; parallel worker i seeds its RNGs with
# ``seed + WORKER_SEED_STRIDE * (i + 1)``.
EVAL_ENV_SEED_OFFSET = 1_000_003
EXAMPLE_ENV_SEED_OFFSET = 10_000_019
WORKER_SEED_STRIDE = 7919


WORKER_TIMEOUT_OFF = ("off", "none", "false", "0")


def parse_worker_timeout(value) -> float | str | None:
    """``"auto"`` (default: a generous multiple of the measured batch time, at least a
    minute), a number of seconds (a number or numeric string), or off (None, 0, False,
    ``"off"``/``"none"``): how long a parallel sampler waits on a silent worker."""
    if value is None or value is False:
        return None
    if isinstance(value, str):
        text = value.strip().lower()
        if text == "auto":
            return "auto"
        if text in WORKER_TIMEOUT_OFF:
            return None
        try:
            value = float(text)
        except ValueError:
            raise ValueError(f"worker_timeout must be 'auto', a number of seconds or 'off'; "
                             f"got {value!r}") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise ValueError(f"worker_timeout must be 'auto', seconds >= 0 or 'off'; got {value!r}")
    return None if value == 0 else float(value)


def make_envs(EnvCls, n: int, env_kwargs: dict, seed: int | None, first_rank: int) -> list:
    """``n`` environments; env ``i`` is seeded ``seed + first_rank + i`` when seeded."""
    envs = [EnvCls(**env_kwargs) for _ in range(n)]
    if seed is not None:
        for i, env in enumerate(envs):
            if hasattr(env, "seed"):
                env.seed(int(seed) + first_rank + i)
    return envs


class BaseSampler(abc.ABC):
    """Holds the environment factory, batch dimensions, collector classes and eval settings.

    ``batch_B`` environments each fill ``n_agents`` batch columns (one for a single-agent
    environment, one per agent for a :class:`~rlfast.envs.multiagent.MultiAgentEnv`), so
    ``batch_spec`` is ``(batch_T, batch_B * n_agents)``.

    Evaluation runs ``eval_n_envs`` environments for at most ``eval_max_steps`` total steps,
    stopping early once ``eval_max_trajectories`` have completed.

    ``check_finite``: after every batch, one vectorized pass over the float observations and
    the rewards raises :class:`rlfast.utils.finite.NonFiniteError` naming the field, step and
    environment of a NaN or inf (False skips it, for speed runs on trusted environments).
    ``worker_timeout`` (parallel samplers): how long to wait on a worker that is alive but
    silent before raising an error that names it, see :func:`parse_worker_timeout`.
    ``max_worker_restarts`` (parallel samplers): how many times in a run a worker that
    raised, died or stayed silent is replaced instead of ending the run (0: never); see
    :meth:`~rlfast.samplers.parallel.base.ParallelSamplerBase.obtain_samples`.
    """

    mid_batch_reset = True
    is_async = False  # the Async* samplers, which AsyncRl runs in a process of their own
    DefaultCollectorCls: type | None = None  # used when no CollectorCls is given
    DefaultEvalCollectorCls: type | None = None

    def __init__(self, EnvCls, env_kwargs: dict, batch_T: int, batch_B: int, CollectorCls=None,
                 max_decorrelation_steps: int = 100, TrajInfoCls=TrajInfo, eval_n_envs: int = 0,
                 eval_CollectorCls=None, eval_env_kwargs: dict | None = None,
                 eval_max_steps: int | None = None, eval_max_trajectories: int | None = None,
                 check_finite: bool = True, worker_timeout: float | str | None = "auto",
                 max_worker_restarts: int = 0):
        if int(batch_T) < 1 or int(batch_B) < 1:
            raise ValueError(f"batch_T and batch_B must be >= 1; got batch_T={batch_T}, "
                             f"batch_B={batch_B}")
        if eval_n_envs and eval_max_steps is None:
            raise ValueError("eval_n_envs > 0 needs eval_max_steps (total evaluation step budget)")
        CollectorCls = CollectorCls or self.DefaultCollectorCls
        if CollectorCls is None:
            raise ValueError(f"{type(self).__name__} needs a CollectorCls")
        eval_CollectorCls = eval_CollectorCls or self.DefaultEvalCollectorCls
        self.EnvCls = EnvCls
        self.env_kwargs = dict(env_kwargs)
        # A multi-agent environment fills one batch column per agent: batch_B environments
        # of n_agents agents give [T, batch_B * n_agents] buffers (rlfast.envs.multiagent).
        self.n_agents = agents_per_env(EnvCls, self.env_kwargs)
        self.n_envs = int(batch_B)
        self.batch_spec = BatchSpec(int(batch_T), int(batch_B) * self.n_agents)
        self.CollectorCls = CollectorCls
        self.mid_batch_reset = CollectorCls.mid_batch_reset
        self.max_decorrelation_steps = int(max_decorrelation_steps)
        if self.n_agents > 1 and TrajInfoCls is TrajInfo:
            TrajInfoCls = MultiAgentTrajInfo  # per-agent rewards: per-agent returns
        self.TrajInfoCls = TrajInfoCls
        self.eval_n_envs = int(eval_n_envs)
        self.eval_CollectorCls = eval_CollectorCls
        self.eval_env_kwargs = (dict(eval_env_kwargs) if eval_env_kwargs is not None
                                else dict(env_kwargs))
        self.eval_max_steps = None if eval_max_steps is None else int(eval_max_steps)
        self.eval_max_trajectories = (None if eval_max_trajectories is None
                                      else int(eval_max_trajectories))
        self.check_finite = bool(check_finite)
        self.worker_timeout = parse_worker_timeout(worker_timeout)
        self.max_worker_restarts = check_int(max_worker_restarts, "max_worker_restarts",
                                             minimum=0, owner=type(self).__name__)
        self.worker_restarts = 0  # workers replaced so far in this run
        self.double_buffer_np: list | None = None  # async samplers: the two batch slots
        self.double_buffer_pyt: list | None = None

    # ---- asynchronous mode (the Async* samplers) ---------------------------------------------
    def async_initialize(self, agent: BaseAgent, bootstrap_value: bool = False,
                         traj_info_kwargs: dict | None = None,
                         seed: int | None = None) -> AttrDict:
        """In the master, before the sampler process is forked: build the agent's CPU model
        from an example environment (seeded ``seed + EXAMPLE_ENV_SEED_OFFSET``) and allocate
        the double buffer, two ``[T, B]`` batch slots in shared memory, that the sampler
        process fills in turn while the other slot is copied into replay. Returns the example
        outputs that size the replay buffer. ``initialize`` then runs in the sampler process.
        """
        if not self.is_async:
            raise TypeError(f"{type(self).__name__} is synchronous; asynchronous runners need "
                            f"AsyncSerialSampler, AsyncCpuSampler, AsyncGpuSampler or "
                            f"AsyncAlternatingSampler")
        B = self.batch_spec.B
        example_env = self.EnvCls(**self.env_kwargs)
        if seed is not None and hasattr(example_env, "seed"):
            example_env.seed(int(seed) + EXAMPLE_ENV_SEED_OFFSET)
        try:
            self.env_spaces = example_env.spaces
            agent.initialize(example_env.spaces, share_memory=False, global_B=B,
                             env_ranks=list(range(B)))
            samples_pyt, samples_np, examples = build_samples_buffer(
                agent, example_env, self.batch_spec, bootstrap_value, agent_shared=True,
                env_shared=True, n_slots=2)
        finally:
            example_env.close()
        self.double_buffer_np = [samples_np[k] for k in range(2)]
        self.double_buffer_pyt = [samples_pyt[k] for k in range(2)]
        self.async_examples = examples
        self.apply_traj_info_kwargs(traj_info_kwargs)
        return examples

    def initialize_agent(self, agent: BaseAgent, env_spaces: Any, share_memory: bool, global_B: int,
                         env_ranks: list) -> None:
        """Build the agent's model for sampling. Synchronous samplers build it here; in an
        async sampler process the model was built in the master before the fork, and
        ``param_sharing.use_own_cpu_model`` gives the sampler its own copy (in shared memory
        when the workers run it)."""
        if self.double_buffer_np is not None:
            use_own_cpu_model(agent, share_memory=share_memory)
        else:
            agent.initialize(env_spaces, share_memory=share_memory, global_B=global_B,
                             env_ranks=env_ranks)

    def use_slot(self, db_idx: int | None) -> None:
        """Async samplers: write the next batch into slot ``db_idx`` of the double buffer
        (None: keep the current one). Subclasses point their collectors at it too."""
        if db_idx is None:
            return
        if self.double_buffer_np is None:
            raise ValueError(f"db_idx={db_idx} given to {type(self).__name__}, which has no "
                             f"double buffer (call async_initialize first)")
        self.samples_np = self.double_buffer_np[db_idx]
        self.samples_pyt = self.double_buffer_pyt[db_idx]

    def check_batch(self, samples_np: Samples, itr: int, env_offset: int = 0) -> None:
        """With ``check_finite``: raise ``NonFiniteError`` if this batch's observations,
        rewards or bootstrap values hold a NaN or inf (integer observations, e.g. uint8
        frames, cost nothing)."""
        if self.check_finite:
            env = samples_np.env
            check_batch_finite(env.observation, "observation", itr, env_offset)
            check_batch_finite(env.reward, "reward", itr, env_offset)
            agent = samples_np.agent
            if "bootstrap_value" in agent:  # the one value computed from the observation
                check_batch_finite(  # after the last step, which the buffer does not hold
                    agent.bootstrap_value,
                    "bootstrap value (the agent's value of the observation after the last step)",
                    itr, env_offset)

    def eval_max_T(self, n_envs: int) -> int:
        """Steps per eval environment: the total budget ``eval_max_steps`` split over them."""
        return max(1, math.ceil(self.eval_max_steps / max(n_envs, 1)))

    def apply_traj_info_kwargs(self, traj_info_kwargs: dict | None) -> None:
        """Bind trajectory settings (e.g. ``discount``) as ``_<name>`` constructor arguments of
        this sampler's TrajInfo class; the class itself is left untouched."""
        if traj_info_kwargs:
            self.TrajInfoCls = functools.partial(
                self.TrajInfoCls, **{"_" + k: v for k, v in traj_info_kwargs.items()})

    def build_buffers(self, agent: BaseAgent, seed: int | None, bootstrap_value: bool,
                      shared: bool, init_agent: Callable | None = None
                      ) -> tuple[Samples, Samples, AttrDict]:
        """Allocate the samples buffer from one example step of a fresh environment (seeded
        ``seed + EXAMPLE_ENV_SEED_OFFSET``); ``init_agent(spaces)``, when given, first builds
        the agent from that environment's spaces. Returns (samples_pyt, samples_np, examples).
        An async sampler (after ``async_initialize``) returns slot 0 of its double buffer.
        """
        if self.double_buffer_np is not None:
            if init_agent is not None:
                init_agent(self.env_spaces)
            return self.double_buffer_pyt[0], self.double_buffer_np[0], self.async_examples
        example_env = self.EnvCls(**self.env_kwargs)
        if seed is not None and hasattr(example_env, "seed"):
            example_env.seed(int(seed) + EXAMPLE_ENV_SEED_OFFSET)
        try:
            if init_agent is not None:
                init_agent(example_env.spaces)
            return build_samples_buffer(agent, example_env, self.batch_spec, bootstrap_value,
                                        agent_shared=shared, env_shared=shared)
        finally:
            example_env.close()

    @abc.abstractmethod
    def initialize(self, agent: BaseAgent, affinity: dict | None = None,
                   seed: int | None = None, bootstrap_value: bool = False,
                   traj_info_kwargs: dict | None = None, rank: int = 0,
                   world_size: int = 1) -> AttrDict:
        """Build the environments, the agent's model and the samples buffer (and start any
        worker processes); return the example outputs that size replay buffers."""

    @abc.abstractmethod
    def obtain_samples(self, itr: int, db_idx: int | None = None) -> tuple[Samples, list]:
        """Collect one ``[T, B]`` batch (async samplers: into double-buffer slot ``db_idx``);
        return (samples, completed trajectory infos)."""

    @abc.abstractmethod
    def evaluate_agent(self, itr: int) -> list:
        """Run the evaluation environments; return the completed trajectory infos."""

    def state_dict(self) -> dict | None:
        """What a resumed run needs to continue this sampler's environments exactly where
        they are (their states, the agent inputs and the running trajectories), or None
        when that cannot be captured: the environments then start new episodes on resume,
        reseeded. The serial sampler captures it when every environment can
        (``Env.get_state``); parallel samplers keep their environments in worker processes
        and return None."""
        return None

    def load_state_dict(self, state: dict | None) -> None:
        """Restore :meth:`state_dict`'s output after ``initialize`` (None: nothing)."""
        if state is not None:
            raise ValueError(f"{type(self).__name__} cannot restore environment states")

    def shutdown(self) -> None:
        """Release the environments and any worker processes (safe to call twice)."""

    @property
    def batch_size(self) -> int:
        """Samples per batch, ``T * B`` (environment steps times agents per environment)."""
        return self.batch_spec.size

    @property
    def env_steps_per_batch(self) -> int:
        """Environment steps per batch, ``T * batch_B``: what runners count. Equal to
        :attr:`batch_size` unless each environment has several agents (columns)."""
        return self.batch_spec.T * self.n_envs


def plain_tree(value: Any) -> Any:
    """A copy of a (nested) namedtuple / namedarraytuple of arrays as nested dicts of arrays,
    which ``weights_only`` snapshots can hold (namedtuple classes they cannot)."""
    if hasattr(value, "_fields"):
        return {name: plain_tree(getattr(value, name)) for name in value._fields}
    return np.array(value, copy=True)


def copy_plain_tree_(dest: Any, plain: Any, where: str = "") -> None:
    """Copy :func:`plain_tree`'s output back into the arrays of ``dest`` in place."""
    if hasattr(dest, "_fields"):
        if set(dest._fields) != set(plain):
            raise ValueError(f"saved fields {sorted(plain)} differ from {sorted(dest._fields)}"
                             f"{' in ' + where if where else ''}")
        for name in dest._fields:
            copy_plain_tree_(getattr(dest, name), plain[name], f"{where}.{name}".lstrip("."))
        return
    source = np.asarray(plain)
    if source.shape != np.shape(dest):
        raise ValueError(f"saved array {where or 'value'} has shape {source.shape}, the "
                         f"sampler's {np.shape(dest)}: was the run resumed with other settings?")
    dest[...] = source
