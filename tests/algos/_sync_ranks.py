"""Helpers for test_sync_equivalence.py: one update of PPO or DQN on fixed data, either in
this process on the whole batch (the single-rank reference) or in real ranks forked from
this process (gloo on 127.0.0.1), each on its share of the batch's columns.

Everything a rank needs is rebuilt in the rank from a scenario name (same seeds, same data),
so nothing but the scenario names crosses the fork, and results come back as numpy arrays
(plain pickles, no shared-memory tensors) through a queue. The parent never joins a process
group: ``init_process_group`` exports the launcher variables into ``os.environ``, which must
not leak into the test process.

Scenario options:

- ``kind``: ``"ppo"``, ``"a2c"`` or ``"dqn"``;
- PPO and A2C: ``agent`` (``"categorical"`` or ``"gaussian"``), ``normalize_observation``,
  ``normalize_advantage``, ``clip_grad_norm``, ``timeouts`` (random time-limit ends, which
  ``bootstrap_timelimit`` masks out of the loss: the ranks then hold different numbers of
  valid steps);
- in the ranks only (to show what the comparison catches): ``ddp=False`` (no
  DistributedDataParallel: gradients are not averaged), ``local_adv_norm`` (advantages
  standardized with this rank's own statistics), ``local_obs_norm`` (observation statistics
  of this rank's own batch).
"""
from __future__ import annotations

import multiprocessing as mp
import queue as queue_module
import time
import traceback

import numpy as np
import torch

from rlfast.agents import CategoricalPgAgent, DqnAgent, MujocoFfAgent
from rlfast.agents.param_sharing import wrap_data_parallel
from rlfast.algos import A2C, PPO
from rlfast.algos.dqn import DQN
from rlfast.envs import EnvSpaces
from rlfast.replays import AgentInputs, SamplesFromReplay
from rlfast.samplers.collections import AgentSamplesBsv, BatchSpec, EnvSamples, Samples
from rlfast.spaces import FloatBox, IntBox
from rlfast.utils.collections import namedarraytuple
from tests.algos._pg_batch import act_through
from tests.runners._sync_runners import numpy_state

WORLD_SIZE = 2
T, B = 8, 6  # PPO batch: rank r takes columns r*B/2 .. (r+1)*B/2
DQN_BATCH = 16  # DQN batch_size: rank r takes rows r*16/2 .. (r+1)*16/2
OBS_DIM, N_ACTIONS, ACTION_DIM = 3, 3, 2
DQN_OBS_DIM, DQN_ACTIONS = 4, 2
LR = 0.5  # SGD: the update is proportional to the gradient (Adam's first step is ~sign(g))

EnvInfo = namedarraytuple("EnvInfo", ["timeout"])

SCENARIOS = {
    # advantage normalization pooled over the ranks; every step valid
    "ppo_cat": dict(kind="ppo", agent="categorical", normalize_advantage=True),
    # the same, with the rank's own advantage statistics (what pooling prevents)
    "ppo_cat_local_adv": dict(kind="ppo", agent="categorical", normalize_advantage=True,
                              local_adv_norm=True),
    # the same, with no gradient all-reduce
    "ppo_cat_no_ddp": dict(kind="ppo", agent="categorical", normalize_advantage=True,
                           ddp=False),
    # Gaussian agent with running observation normalization, advantages normalized too, and
    # the gradient norm clipped (the global norm: the clip must see the averaged gradient)
    "ppo_gauss_obsnorm": dict(kind="ppo", agent="gaussian", normalize_observation=True,
                              normalize_advantage=True, clip_grad_norm=0.5),
    "ppo_gauss_local_obsnorm": dict(kind="ppo", agent="gaussian", normalize_observation=True,
                                    normalize_advantage=True, clip_grad_norm=0.5,
                                    local_obs_norm=True),
    # time-limit ends masked out of the loss: the ranks hold different numbers of valid steps
    "ppo_cat_timeouts": dict(kind="ppo", agent="categorical", normalize_advantage=True,
                             timeouts=True),
    "a2c_cat": dict(kind="a2c", agent="categorical", normalize_advantage=True),
    "a2c_cat_timeouts": dict(kind="a2c", agent="categorical", normalize_advantage=True,
                             timeouts=True),
    "dqn": dict(kind="dqn"),
    "dqn_no_ddp": dict(kind="dqn", ddp=False),
}


# ---- data ---------------------------------------------------------------------------------
def _pg_spaces(agent_kind: str) -> EnvSpaces:
    action = IntBox(0, N_ACTIONS) if agent_kind == "categorical" else \
        FloatBox(-2, 2, shape=(ACTION_DIM,))
    return EnvSpaces(observation=FloatBox(-1, 1, shape=(OBS_DIM,)), action=action)


def _pg_agent(opts: dict, seed: int = 0):
    torch.manual_seed(seed)
    model_kwargs = dict(hidden_sizes=[8], normalize_observation=opts.get("normalize_observation",
                                                                         False))
    Cls = CategoricalPgAgent if opts["agent"] == "categorical" else MujocoFfAgent
    agent = Cls(model_kwargs=model_kwargs)
    agent.initialize(_pg_spaces(opts["agent"]))
    return agent


def _pg_samples(agent, opts: dict, seed: int = 0) -> Samples:
    """A sampler-style ``[T, B]`` batch the agent acted on. Columns differ in observation
    scale and offset and in reward mean, so each rank's half has its own statistics (local
    and pooled normalization then differ)."""
    rng = np.random.RandomState(seed)
    torch.manual_seed(seed)
    col = np.arange(B, dtype=np.float64)
    obs = rng.uniform(-1, 1, size=(T, B, OBS_DIM)) * (1 + col[None, :, None]) \
        + 0.7 * col[None, :, None]
    obs = torch.as_tensor(obs, dtype=torch.float32)
    reward = torch.as_tensor(rng.randn(T, B) + 0.5 * col[None, :], dtype=torch.float32)
    done = torch.as_tensor(rng.rand(T, B) < 0.25)
    if opts.get("timeouts"):
        timeout = done & torch.as_tensor(rng.rand(T, B) < 0.6)
    else:
        timeout = torch.zeros(T, B, dtype=torch.bool)
    actions, prev_actions, prev_rewards, agent_info = act_through(
        agent, obs, reward, done, gaussian=opts["agent"] != "categorical")
    bootstrap_value = torch.as_tensor(rng.randn(1, B), dtype=torch.float32)
    return Samples(
        agent=AgentSamplesBsv(action=actions, prev_action=prev_actions, agent_info=agent_info,
                              bootstrap_value=bootstrap_value),
        env=EnvSamples(observation=obs, reward=reward, prev_reward=prev_rewards,
                       done=done, env_info=EnvInfo(timeout=timeout)))


def _perturb(agent, seed: int = 1, scale: float = 0.1) -> None:
    """Move the parameters off the sampling policy, so that the likelihood ratios differ
    from 1 (without this, PPO's first step would see ratios of exactly 1)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in agent.model.parameters():
            p.add_(scale * torch.randn(p.shape, generator=g))


def valid_counts(name: str) -> list:
    """The number of steps the loss trains on (not cut by a time limit) in each rank's
    half of scenario ``name``'s batch."""
    opts = SCENARIOS[name]
    timeout = _pg_samples(_pg_agent(opts), opts).env.env_info.timeout
    half = B // WORLD_SIZE
    return [int((~timeout[:, r * half:(r + 1) * half]).sum()) for r in range(WORLD_SIZE)]


def dqn_spaces() -> EnvSpaces:
    return EnvSpaces(observation=FloatBox(-1, 1, shape=(DQN_OBS_DIM,)),
                     action=IntBox(0, DQN_ACTIONS))


def _dqn_agent(seed: int = 0):
    torch.manual_seed(seed)
    agent = DqnAgent(model_kwargs=dict(hidden_sizes=[8]))
    agent.initialize(dqn_spaces())
    return agent


def _dqn_batch(seed: int = 0) -> SamplesFromReplay:
    """A fixed replay batch of ``DQN_BATCH`` transitions; the halves differ in statistics."""
    rng = np.random.RandomState(seed + 100)
    n = DQN_BATCH
    shift = np.repeat([0.0, 1.0], n // 2)[:, None]
    obs = torch.as_tensor(rng.randn(n, DQN_OBS_DIM) + shift, dtype=torch.float32)
    next_obs = torch.as_tensor(rng.randn(n, DQN_OBS_DIM) + shift, dtype=torch.float32)
    action = torch.as_tensor(rng.randint(0, DQN_ACTIONS, size=n), dtype=torch.long)
    prev_action = torch.as_tensor(rng.randint(0, DQN_ACTIONS, size=n), dtype=torch.long)
    prev_reward = torch.as_tensor(rng.randn(n), dtype=torch.float32)
    return_ = torch.as_tensor(rng.randn(n) * 2 + shift[:, 0], dtype=torch.float32)
    done_n = torch.as_tensor(rng.rand(n) < 0.3)
    return SamplesFromReplay(agent_inputs=AgentInputs(obs, prev_action, prev_reward),
                             action=action, return_=return_, done=done_n.clone(), done_n=done_n,
                             target_inputs=AgentInputs(next_obs, action, return_))


def dqn_examples() -> dict:
    return dict(observation=np.zeros(DQN_OBS_DIM, dtype=np.float32),
                action=np.zeros((), dtype=np.int64), reward=np.zeros((), dtype=np.float32),
                done=np.zeros((), dtype=bool))


# ---- one update ---------------------------------------------------------------------------
def _local_mean_std(x, mask=None):
    """What advantage normalization computes without pooling: this rank's own statistics."""
    x64 = x.detach().double()
    m64 = torch.ones_like(x64) if mask is None else mask.detach().double()
    n = m64.sum().clamp(min=1.0)
    mean = (x64 * m64).sum() / n
    std = ((((x64 - mean) ** 2) * m64).sum() / n).sqrt()
    return mean.to(x.dtype), std.to(x.dtype)


class _NotDistributed:
    """Stands in for ``rlfast.utils.distributed`` where a rank must ignore the other ranks."""

    @staticmethod
    def is_distributed() -> bool:
        return False


def _state(agent) -> dict:
    """The agent's full state (targets included) as float64 numpy arrays, flat keys."""
    return numpy_state(agent.state_dict())


def run_update(name: str, world_size: int = 1, rank: int = 0) -> dict:
    """One update of scenario ``name`` as ``rank`` of ``world_size`` (world_size 1: the
    whole batch, no process group). Returns ``state`` (after the update), ``initial`` (the
    state before it), ``opt_info`` (its lists) and, for DQN, ``requested`` (the batch sizes
    asked of the replay buffer) and the algorithm's schedule."""
    opts = SCENARIOS[name]
    share = slice(rank * (B // world_size), (rank + 1) * (B // world_size))
    distributed_run = world_size > 1
    if opts["kind"] in ("ppo", "a2c"):
        agent = _pg_agent(opts)
        samples = _pg_samples(agent, opts)
        _perturb(agent)
        common = dict(discount=0.9, gae_lambda=0.95, learning_rate=LR, OptimCls=torch.optim.SGD,
                      value_loss_coeff=0.5, entropy_loss_coeff=0.01,
                      clip_grad_norm=opts.get("clip_grad_norm", 1e6),
                      normalize_advantage=opts["normalize_advantage"], bootstrap_timelimit=True)
        if opts["kind"] == "ppo":  # one epoch of one minibatch: the whole (local) batch
            algo = PPO(ratio_clip=0.2, minibatches=1, epochs=1, linear_lr_schedule=True,
                       **common)
        else:
            algo = A2C(**common)
        local = samples[:, share] if distributed_run else samples
        batch_spec = BatchSpec(T, B // world_size)
        initial = _state(agent)
        if distributed_run and opts.get("ddp", True):
            wrap_data_parallel(agent)
        agent.train_mode(0)
        algo.initialize(agent, n_itr=4, batch_spec=batch_spec, mid_batch_reset=True,
                        examples=None, world_size=world_size, rank=rank)
        patches = []
        if distributed_run and opts.get("local_adv_norm"):
            import rlfast.algos.pg.base as pg_base
            patches.append((pg_base, "global_mean_std", _local_mean_std))
        if distributed_run and opts.get("local_obs_norm"):
            import rlfast.utils.running_mean_std as rms
            patches.append((rms, "distributed", _NotDistributed))
        saved = [(m, a, getattr(m, a)) for m, a, _ in patches]
        try:
            for module, attr, value in patches:
                setattr(module, attr, value)
            np.random.seed(0)
            info = algo.optimize_agent(0, local)
        finally:
            for module, attr, value in saved:
                setattr(module, attr, value)
        return dict(state=_state(agent), initial=initial, opt_info=info._asdict())
    # DQN
    agent = _dqn_agent()
    batch = _dqn_batch()
    rows = DQN_BATCH // world_size
    local = batch[rank * rows:(rank + 1) * rows] if distributed_run else batch
    initial = _state(agent)
    if distributed_run and opts.get("ddp", True):
        wrap_data_parallel(agent)
    n_envs = 4  # every rank steps n_envs / world_size environments of one step
    algo = DQN(discount=0.9, batch_size=DQN_BATCH, min_steps_learn=0, delta_clip=1.0,
               replay_size=64, replay_ratio=DQN_BATCH / n_envs, target_update_tau=0.5,
               target_update_interval=1, n_step_return=1, learning_rate=LR,
               OptimCls=torch.optim.SGD, clip_grad_norm=1e6, double_dqn=True)
    algo.initialize(agent, n_itr=4, batch_spec=BatchSpec(1, n_envs // world_size),
                    mid_batch_reset=True, examples=dqn_examples(), world_size=world_size,
                    rank=rank)
    requested = []

    def sample_batch(batch_B):
        requested.append(int(batch_B))
        return local

    algo.replay_buffer.sample_batch = sample_batch
    agent.train_mode(0)
    info = algo.optimize_agent(0, None)
    return dict(state=_state(agent), initial=initial, opt_info=info._asdict(),
                requested=requested, updates_per_optimize=algo.updates_per_optimize,
                min_itr_learn=algo.min_itr_learn, update_counter=algo.update_counter,
                rank_replay_size=algo.rank_replay_size,
                replay_capacity=int(algo.replay_buffer.size))


# ---- ranks --------------------------------------------------------------------------------
def _rank_main(rank: int, world_size: int, port: int, names: list, results) -> None:
    """A forked rank: join the group, run every scenario in order, report, leave."""
    from rlfast.utils import distributed
    from rlfast.utils.distributed import DistEnv
    try:
        torch.set_num_threads(1)
        env = DistEnv(rank=rank, local_rank=rank, world_size=world_size,
                      local_world_size=world_size, master_addr="127.0.0.1", master_port=port,
                      launcher="spawn")
        distributed.init_process_group(env, "gloo", 60)
        try:
            out = {name: run_update(name, world_size, rank) for name in names}
        finally:
            distributed.destroy_process_group()
        results.put(("ok", rank, out))
    except BaseException:  # noqa: BLE001 - every failure must reach the test
        results.put(("error", rank, traceback.format_exc()))


def run_ranks(names: list, world_size: int = WORLD_SIZE, timeout_s: float = 120.0) -> list:
    """Fork ``world_size`` ranks that each run the scenarios ``names``; return each rank's
    ``{name: run_update(...)}`` in rank order. A rank that fails, or no answer within
    ``timeout_s``, raises AssertionError; every rank is joined (killed if need be) before
    this returns or raises."""
    from rlfast.utils.distributed import free_port
    ctx = mp.get_context("fork")
    results = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_rank_main, args=(r, world_size, port, list(names), results),
                         name=f"sync-equivalence-rank-{r}", daemon=True)
             for r in range(world_size)]
    for p in procs:
        p.start()
    replies: dict = {}
    errors = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(replies) + len(errors) < world_size:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"ranks {sorted(set(range(world_size)) - set(replies))} "
                                     f"did not answer within {timeout_s} s")
            try:
                status, rank, payload = results.get(timeout=min(remaining, 1.0))
            except queue_module.Empty:
                dead = [p for p in procs if p.exitcode not in (None, 0)]
                if dead:
                    raise AssertionError(f"a rank died: {[(p.name, p.exitcode) for p in dead]}")
                continue
            if status == "ok":
                replies[rank] = payload
            else:
                errors.append(f"rank {rank} raised:\n{payload}")
                break  # the others would wait on it until the collective timeout
        if errors:
            raise AssertionError("\n".join(errors))
        return [replies[r] for r in range(world_size)]
    finally:
        for p in procs:
            p.join(timeout=10 if not errors else 0.5)
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join(timeout=5)
        results.close()
        results.join_thread()
