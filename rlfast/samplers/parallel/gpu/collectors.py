"""Collectors for the GPU samplers: actions come from the action server in the master.

They run the same loops as the CPU collectors and differ only in their action source,
:class:`ServerActions`: the agent inputs live in this worker's rows of the shared step buffer;
``act`` signals "observations ready" and waits for "actions ready"; agent resets become flags
in the step buffer that the master applies to its batched agent.
"""
from __future__ import annotations

import os
from typing import Any

import numpy as np

from rlfast.agents.base import AgentInputs
from rlfast.samplers.collections import Samples
from rlfast.samplers.collectors import ActionSource, BaseEvalCollector, TrainCollector
from rlfast.utils.processes import acquire_while_parent_alive


class ServerActions(ActionSource):
    """Actions from the master's action server, through the shared step buffer.

    Resets of wait-reset collectors are deferred to the next batch start: until the master
    asks for new samples it may still read this worker's step-buffer rows (for the bootstrap
    value and the pending agent-reset flags).
    """

    defer_resets = True
    remote = True

    def __init__(self, sync=None, step_buffer_np=None, **_):
        self.sync = sync
        self.step_buffer_np = step_buffer_np
        self._parent_pid = os.getppid()

    def start(self, global_B: int, env_ranks: list | None) -> None:
        pass  # the agent lives in the master

    def input_arrays(self, first_observations: list, null_action: np.ndarray) -> AgentInputs:
        step = self.step_buffer_np
        for b, obs in enumerate(first_observations):
            step.observation[b] = obs
        step.action[:] = null_action
        step.reward[:] = 0
        step.reset[:] = False
        return AgentInputs(step.observation, step.action, step.reward)

    def act(self, agent_inputs_pyt: AgentInputs, action_out: np.ndarray) -> Any:
        # action_out is the step buffer's action array: the master writes it in place.
        self.sync.obs_ready.release()
        acquire_while_parent_alive(self.sync.act_ready, self._parent_pid, self.sync.get("stop"))
        return self.step_buffer_np.agent_info

    def reset_one(self, b: int) -> None:
        self.step_buffer_np.reset[b] = True

    def start_batch(self, itr: int) -> None:
        pass  # the master sets the agent's mode

    def finish_batch(self, agent_inputs_pyt: AgentInputs, samples_np: Samples) -> None:
        self.sync.obs_ready.release()  # last observations: the master may bootstrap from them

    def start_evaluation(self, itr: int) -> None:
        pass

    def finish_evaluation(self) -> None:
        self.sync.eval_done.value = True
        self.sync.obs_ready.release()


class GpuResetCollector(TrainCollector):
    """Reset finished environments mid-batch (as CpuResetCollector), actions from the server."""

    ActionsCls = ServerActions
    mid_batch_reset = True


class GpuWaitResetCollector(TrainCollector):
    """Wait for the batch end to reset (as CpuWaitResetCollector), actions from the server;
    the resets run at the start of the next batch (see :class:`ServerActions`)."""

    ActionsCls = ServerActions
    mid_batch_reset = False


class GpuEvalCollector(BaseEvalCollector):
    """Evaluation with actions from the server; signals the master when it has finished."""

    ActionsCls = ServerActions
