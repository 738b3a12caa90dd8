"""Collectors for the GPU samplers: actions come from the action server in the master.

They run the same loops as the CPU collectors and replace only the agent hooks: the agent
inputs live in this worker's rows of the shared step buffer; ``get_actions`` signals
"observations ready" and waits for "actions ready"; agent resets become flags in the step
buffer that the master applies to its batched agent.
"""
from __future__ import annotations

import os

from rlfast.samplers.collectors import BaseEvalCollector, DecorrelatingStartCollector
from rlfast.samplers.parallel.worker import StopWorker
from rlfast.samplers.parallel.cpu.collectors import (CpuResetCollector, CpuWaitResetCollector,
                                                     ResetLoop)

_WAIT_S = 1.0


def acquire_while_parent_alive(semaphore, parent_pid: int, stop_flag=None) -> None:
    """Block on ``semaphore``; stop if the master is shutting down or has gone away."""
    while not semaphore.acquire(timeout=_WAIT_S):
        if stop_flag is not None and stop_flag.value:
            raise StopWorker("the sampler is shutting down")
        if os.getppid() != parent_pid:
            raise RuntimeError("the sampler master process exited; worker stopping")


class ActionServerClient:
    """Agent hooks that talk to the master's action server through the step buffer."""

    def _init_client(self) -> None:
        self._parent_pid = os.getppid()

    def input_arrays(self, first_observations: list):
        step = self.step_buffer_np
        for b, obs in enumerate(first_observations):
            step.observation[b] = obs
        step.action[:] = self._null_action
        step.reward[:] = 0
        step.reset[:] = False
        return step.observation, step.action, step.reward

    def get_actions(self, agent_inputs_pyt, t: int):
        self.sync.obs_ready.release()
        acquire_while_parent_alive(self.sync.act_ready, self._parent_pid, self.sync.get("stop"))
        return self.step_buffer_np.action, self.step_buffer_np.agent_info

    def reset_agent_one(self, b: int) -> None:
        self.step_buffer_np.reset[b] = True

    def start_batch_agent(self, itr: int) -> None:
        pass  # the master sets the agent's mode

    def start_eval_agent(self, itr: int) -> None:
        pass

    def finish_batch(self, agent_inputs_pyt) -> None:
        self.sync.obs_ready.release()  # last observations: the master may bootstrap from them

    def finish_evaluation(self) -> None:
        self.sync.eval_done.value = True
        self.sync.obs_ready.release()


class GpuResetCollector(ActionServerClient, ResetLoop, DecorrelatingStartCollector):
    """Reset finished environments mid-batch (as CpuResetCollector), actions from the server."""

    mid_batch_reset = True
    skip_env = CpuResetCollector.skip_env
    traj_reset = CpuResetCollector.traj_reset
    on_done = CpuResetCollector.on_done

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._init_client()


class GpuWaitResetCollector(ActionServerClient, CpuWaitResetCollector):
    """Wait for the batch end to reset (as CpuWaitResetCollector), actions from the server.

    The resets run at the start of the next batch, not right after the last step: until the
    master asks for new samples it may still read this worker's step-buffer rows (for the
    bootstrap value and the pending agent-reset flags).
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._init_client()

    def reset_if_needed(self, agent_inputs) -> None:
        pass  # deferred to collect_batch, see the class docstring

    def collect_batch(self, agent_inputs, traj_infos, itr):
        CpuWaitResetCollector.reset_if_needed(self, agent_inputs)
        return super().collect_batch(agent_inputs, traj_infos, itr)


class GpuEvalCollector(ActionServerClient, BaseEvalCollector):
    """Evaluation with actions from the server; signals the master when it has finished."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._init_client()
