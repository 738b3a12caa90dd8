"""The serial sampler: environments and agent all in the master process."""
from __future__ import annotations

from rlfast.samplers.base import BaseSampler, make_envs
from rlfast.samplers.buffer import build_samples_buffer
from rlfast.samplers.parallel.cpu.collectors import CpuResetCollector
from rlfast.samplers.serial.collectors import SerialEvalCollector


class SerialSampler(BaseSampler):
    """No parallelism: simplest to debug (``breakpoint()`` works) and exactly reproducible for a
    given seed. Use with collectors that call the agent themselves (CPU collectors)."""

    def __init__(self, *args, CollectorCls=CpuResetCollector,
                 eval_CollectorCls=SerialEvalCollector, **kwargs):
        super().__init__(*args, CollectorCls=CollectorCls, eval_CollectorCls=eval_CollectorCls,
                         **kwargs)
        self.envs, self.eval_envs = [], []

    def initialize(self, agent, affinity=None, seed=None, bootstrap_value=False,
                   traj_info_kwargs=None, rank=0, world_size=1):
        B = self.batch_spec.B
        global_B = B * world_size
        env_ranks = list(range(rank * B, (rank + 1) * B))
        self.envs = make_envs(self.EnvCls, B, self.env_kwargs, seed, rank * B)
        agent.initialize(self.envs[0].spaces, share_memory=False, global_B=global_B,
                         env_ranks=env_ranks)
        example_env = self.EnvCls(**self.env_kwargs)
        if seed is not None and hasattr(example_env, "seed"):
            example_env.seed(int(seed) + 10_000_019)
        try:
            self.samples_pyt, self.samples_np, examples = build_samples_buffer(
                agent, example_env, self.batch_spec, bootstrap_value,
                agent_shared=False, env_shared=False)
        finally:
            example_env.close()
        self.apply_traj_info_kwargs(traj_info_kwargs)
        self.collector = self.CollectorCls(
            rank=0, envs=self.envs, samples_np=self.samples_np, batch_T=self.batch_spec.T,
            TrajInfoCls=self.TrajInfoCls, agent=agent, global_B=global_B, env_ranks=env_ranks)
        if self.eval_n_envs > 0:
            eval_seed = None if seed is None else int(seed) + 1_000_003
            self.eval_envs = make_envs(self.EnvCls, self.eval_n_envs, self.eval_env_kwargs, eval_seed, 0)
            self.eval_collector = self.eval_CollectorCls(
                envs=self.eval_envs, agent=agent, TrajInfoCls=self.TrajInfoCls,
                max_T=self.eval_max_T(self.eval_n_envs),
                max_trajectories=self.eval_max_trajectories)
        self.agent = agent
        self.agent_inputs, self.traj_infos = self.collector.start_envs(self.max_decorrelation_steps)
        self.collector.start_agent()
        return examples

    def obtain_samples(self, itr: int):
        self.collector.reset_if_needed(self.agent_inputs)
        self.agent_inputs, self.traj_infos, completed = self.collector.collect_batch(
            self.agent_inputs, self.traj_infos, itr)
        return self.samples_pyt, completed

    def evaluate_agent(self, itr: int) -> list:
        if self.eval_n_envs == 0:
            raise ValueError("evaluate_agent() needs eval_n_envs > 0 in the sampler")
        return self.eval_collector.collect_evaluation(itr)

    def shutdown(self) -> None:
        for env in self.envs + self.eval_envs:
            env.close()
        self.envs, self.eval_envs = [], []
