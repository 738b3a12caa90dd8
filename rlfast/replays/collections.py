"""Named array tuples that replay buffers take in and hand out.

``AgentInputs`` has the same fields as :class:`rlfast.agents.base.AgentInputs` (replays sit
below agents in the layer order, so they define their own; namedarraytuples with the same
fields are interchangeable for the agent). ``SamplesFromReplay`` is one batch of single
transitions (leading dim ``[batch_B]``), ``SamplesFromReplayTL`` the same with time-limit
fields for bootstrapping through time-limit ends; ``SequenceSamplesFromReplay`` is a batch of
sequences (leading dims ``[batch_T + n_step_return, batch_B]``). The ``*Pri`` variants add the
importance-sampling weights of prioritized replay. ``PrioritiesSamplesToBuffer`` wraps samples
with input priorities for ``append_samples``.
"""
from __future__ import annotations

from rlfast.utils.collections import namedarraytuple

__all__ = [
    "AgentInputs", "SamplesFromReplay", "SamplesFromReplayPri", "SequenceSamplesFromReplay",
    "SequenceSamplesFromReplayPri", "PrioritiesSamplesToBuffer", "SamplesFromReplayTL",
    "SamplesFromReplayTLPri",
]

AgentInputs = namedarraytuple("AgentInputs", ["observation", "prev_action", "prev_reward"])

SamplesFromReplay = namedarraytuple(
    "SamplesFromReplay",
    ["agent_inputs", "action", "return_", "done", "done_n", "target_inputs"])
SamplesFromReplayPri = namedarraytuple(
    "SamplesFromReplayPri", SamplesFromReplay._fields + ("is_weights",))

# Time-limit aware transitions: ``timeout`` at t; ``timeout_n`` when the n-step window was cut
# by a time limit; ``bootstrap_discount`` the factor of the target value (gamma ** steps to the
# window's end, or 0 after a true termination or where no bootstrap state is stored).
SamplesFromReplayTL = namedarraytuple(
    "SamplesFromReplayTL",
    SamplesFromReplay._fields + ("timeout", "timeout_n", "bootstrap_discount"))
SamplesFromReplayTLPri = namedarraytuple(
    "SamplesFromReplayTLPri", SamplesFromReplayTL._fields + ("is_weights",))

SequenceSamplesFromReplay = namedarraytuple(
    "SequenceSamplesFromReplay",
    ["agent_inputs", "action", "return_", "done", "done_n", "init_rnn_state"])
SequenceSamplesFromReplayPri = namedarraytuple(
    "SequenceSamplesFromReplayPri", SequenceSamplesFromReplay._fields + ("is_weights",))

PrioritiesSamplesToBuffer = namedarraytuple("PrioritiesSamplesToBuffer", ["priorities", "samples"])
