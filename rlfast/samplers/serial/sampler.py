"""The serial sampler: environments and agent all in the master process."""
from __future__ import annotations

from rlfast.agents.base import BaseAgent
from rlfast.samplers.collections import Samples
from rlfast.utils.collections import AttrDict
from rlfast.samplers.base import (EVAL_ENV_SEED_OFFSET, BaseSampler, copy_plain_tree_,
                                  make_envs, plain_tree)
from rlfast.samplers.parallel.cpu.collectors import CpuResetCollector
from rlfast.samplers.serial.collectors import SerialEvalCollector


class SerialSampler(BaseSampler):
    """No parallelism: simplest to debug (``breakpoint()`` works) and exactly reproducible for a
    given seed. Use with collectors that call the agent themselves (CPU collectors)."""

    DefaultCollectorCls = CpuResetCollector
    DefaultEvalCollectorCls = SerialEvalCollector
    restores_state = True  # state_dict / load_state_dict continue the environments exactly

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.envs, self.eval_envs = [], []

    def initialize(self, agent: BaseAgent, affinity: dict | None = None,
                   seed: int | None = None, bootstrap_value: bool = False,
                   traj_info_kwargs: dict | None = None, rank: int = 0,
                   world_size: int = 1) -> AttrDict:
        """Build the ``batch_B`` environments (env ``i`` seeded ``seed + rank * B + i``), the
        agent's model (not in shared memory), the samples buffer and the collectors; take the
        decorrelating random steps. ``affinity`` is accepted for a uniform signature and
        unused (everything runs in this process). Returns the example outputs."""
        B = self.batch_spec.B  # columns: batch_B environments times their agents
        global_B = B * world_size
        env_ranks = list(range(rank * B, (rank + 1) * B))
        self.env_offset = rank * B
        self.envs = make_envs(self.EnvCls, self.n_envs, self.env_kwargs, seed,
                              rank * self.n_envs)
        self.initialize_agent(agent, self.envs[0].spaces, share_memory=False,
                              global_B=global_B, env_ranks=env_ranks)
        self.samples_pyt, self.samples_np, examples = self.build_buffers(
            agent, seed, bootstrap_value, shared=False)
        self.apply_traj_info_kwargs(traj_info_kwargs)
        self.collector = self.CollectorCls(
            rank=0, envs=self.envs, samples_np=self.samples_np, batch_T=self.batch_spec.T,
            TrajInfoCls=self.TrajInfoCls, agent=agent, global_B=global_B, env_ranks=env_ranks)
        if self.eval_n_envs > 0:
            eval_seed = None if seed is None else int(seed) + EVAL_ENV_SEED_OFFSET
            self.eval_envs = make_envs(self.EnvCls, self.eval_n_envs, self.eval_env_kwargs,
                                       eval_seed, 0)
            self.eval_collector = self.eval_CollectorCls(
                envs=self.eval_envs, agent=agent, TrajInfoCls=self.TrajInfoCls,
                max_T=self.eval_max_T(self.eval_n_envs),
                max_trajectories=self.eval_max_trajectories)
        self.agent = agent
        self.agent_inputs, self.traj_infos = self.collector.start_envs(self.max_decorrelation_steps)
        self.collector.start_agent()
        return examples

    def use_slot(self, db_idx: int | None) -> None:
        """Async: point the collector at slot ``db_idx`` of the double buffer."""
        super().use_slot(db_idx)
        if db_idx is not None:
            self.collector.samples_np = self.samples_np

    def obtain_samples(self, itr: int, db_idx: int | None = None) -> tuple[Samples, list]:
        """Reset idle environments (wait-reset collectors), then collect one batch in this
        process (async: into double-buffer slot ``db_idx``); returns (samples, completed
        trajectory infos)."""
        self.use_slot(db_idx)
        self.collector.reset_if_needed(self.agent_inputs)
        self.agent_inputs, self.traj_infos, completed = self.collector.collect_batch(
            self.agent_inputs, self.traj_infos, itr)
        self.check_batch(self.samples_np, itr, self.env_offset)
        return self.samples_pyt, completed

    def evaluate_agent(self, itr: int) -> list:
        """Run the evaluation collector; returns the completed trajectory infos."""
        if self.eval_n_envs == 0:
            raise ValueError("evaluate_agent() needs eval_n_envs > 0 in the sampler")
        return self.eval_collector.collect_evaluation(itr)

    def state_dict(self) -> dict | None:
        """Every environment's state (training and evaluation), the agent inputs, the
        running trajectory infos, the collector's wait-reset flags and a recurrent agent's
        sampling state: a run resumed from it steps on exactly as the uninterrupted run would.
        None when some environment cannot be captured (``Env.get_state`` returned None) or a
        recurrent agent's state is not a memory core's (``rlfast.models.memory``)."""
        if not self.restores_state:
            return None  # an async sampler's environments live in its own process
        rnn_state = None
        if getattr(self.agent, "recurrent", False):
            rnn_state = self.agent.rnn_states.sampling_state_dict()
            if rnn_state is None:
                return None
        envs = [env.get_state() for env in self.envs]
        eval_envs = [env.get_state() for env in self.eval_envs]
        if any(state is None for state in envs + eval_envs):
            return None
        return dict(envs=envs, eval_envs=eval_envs, rnn_state=rnn_state,
                    agent_inputs=plain_tree(self.agent_inputs),
                    traj_infos=[dict(info) for info in self.traj_infos],
                    need_reset=self.collector.need_reset.copy(),
                    need_env_reset=self.collector.need_env_reset.copy())

    def load_state_dict(self, state: dict | None) -> None:
        """Restore :meth:`state_dict`'s output into the environments and buffers built by
        ``initialize`` (with the same settings)."""
        if state is None:
            return
        for kind, envs in (("training", self.envs), ("evaluation", self.eval_envs)):
            saved = state["envs" if kind == "training" else "eval_envs"]
            if len(saved) != len(envs):
                raise ValueError(f"the snapshot holds {len(saved)} {kind} environments, this "
                                 f"sampler {len(envs)}: resume with the run's batch_B and "
                                 f"eval_n_envs")
            for env, env_state in zip(envs, saved):
                env.set_state(env_state)
        copy_plain_tree_(self.agent_inputs, state["agent_inputs"], "agent_inputs")
        infos = []
        for saved in state["traj_infos"]:
            info = self.TrajInfoCls()
            info.update(saved)
            infos.append(info)
        self.traj_infos = infos
        self.collector.need_reset[:] = state["need_reset"]
        self.collector.need_env_reset[:] = state["need_env_reset"]
        if state.get("rnn_state") is not None:
            self.agent.rnn_states.load_sampling_state_dict(state["rnn_state"], self.agent.device)

    def shutdown(self) -> None:
        """Close every environment."""
        for env in self.envs + self.eval_envs:
            env.close()
        self.envs, self.eval_envs = [], []
