"""R2D1: recurrent DQN trained on replayed sequences (Kapturowski et al., 2019).

Sequences start from the recurrent state stored when they were sampled; the first
``warmup_T`` steps only burn in the LSTM state (no gradient), the next ``batch_T`` are trained
with n-step double-Q targets under the invertible value rescaling h. Sequence priorities mix
the max and mean absolute TD error: ``eta * max + (1 - eta) * mean``.
"""
from __future__ import annotations

from typing import Any

import torch

from rlfast.algos.dqn.dqn import DQN, huber
from rlfast.algos.utils import discount_return_n_step, valid_from_done
from rlfast.replays import PrioritiesSamplesToBuffer
from rlfast.utils.buffer import buffer_func
from rlfast.utils.checks import check_fraction, check_int
from rlfast.utils.collections import namedarraytuple
from rlfast.utils.tensor import select_at_indexes, valid_mean

# prev_action / prev_reward travel as the sampler recorded them: with wait-reset collectors an
# episode can start after idle steps whose done is False, so they cannot be derived from t-1.
SamplesToBufferRnn = namedarraytuple("SamplesToBufferRnn",
                                     ["observation", "action", "reward", "done", "prev_action",
                                      "prev_reward", "prev_rnn_state"])


def value_rescale(x: torch.Tensor, eps: float = 1e-3) -> torch.Tensor:
    """h(x) = sign(x) (sqrt(|x| + 1) - 1) + eps x."""
    return x.sign() * ((x.abs() + 1).sqrt() - 1) + eps * x


def inv_value_rescale(x: torch.Tensor, eps: float = 1e-3) -> torch.Tensor:
    """h^-1(x) = sign(x) (((sqrt(1 + 4 eps (|x| + 1 + eps)) - 1) / (2 eps))^2 - 1)."""
    root = ((1 + 4 * eps * (x.abs() + 1 + eps)).sqrt() - 1) / (2 * eps)
    return x.sign() * (root ** 2 - 1)


class R2D1(DQN):
    """Recurrent replay DQN. ``batch_B`` sequences of ``warmup_T + batch_T`` steps per update;
    ``replay_ratio`` still counts replayed steps per sampled step (trained steps only)."""

    replay_sequences = True

    def __init__(self, discount: float = 0.997, batch_T: int = 80, batch_B: int = 64,
                 warmup_T: int = 40, store_rnn_state_interval: int = 40,
                 min_steps_learn: int = 100_000, delta_clip: float | None = None,
                 replay_size: int = 1_000_000, replay_ratio: float = 1,
                 target_update_interval: int = 2500, n_step_return: int = 5,
                 learning_rate: float = 1e-4, clip_grad_norm: float = 80.0,
                 double_dqn: bool = True, prioritized_replay: bool = True,
                 pri_alpha: float = 0.6, pri_beta_init: float = 0.9, pri_beta_final: float = 0.9,
                 pri_eta: float = 0.9, value_scale_eps: float = 1e-3,
                 input_priorities: bool = True, input_priority_shift: int | None = None,
                 **kwargs: Any):
        batch_T = check_int(batch_T, "batch_T", minimum=1, owner="R2D1")
        batch_B = check_int(batch_B, "batch_B", minimum=1, owner="R2D1")
        warmup_T = check_int(warmup_T, "warmup_T", minimum=0, owner="R2D1")
        super().__init__(discount=discount, batch_size=batch_B * batch_T,
                         min_steps_learn=min_steps_learn, delta_clip=delta_clip,
                         replay_size=replay_size, replay_ratio=replay_ratio,
                         target_update_interval=target_update_interval,
                         n_step_return=n_step_return, learning_rate=learning_rate,
                         clip_grad_norm=clip_grad_norm, double_dqn=double_dqn,
                         prioritized_replay=prioritized_replay, pri_alpha=pri_alpha,
                         pri_beta_init=pri_beta_init, pri_beta_final=pri_beta_final, **kwargs)
        self.batch_T, self.batch_B, self.warmup_T = batch_T, batch_B, warmup_T
        check_fraction(pri_eta, "pri_eta", owner="R2D1")
        self.store_rnn_state_interval = int(store_rnn_state_interval)
        self.pri_eta = pri_eta
        self.value_scale_eps = value_scale_eps
        # Input priorities need stored states (sequence starts) and prioritized replay.
        self.input_priorities = bool(input_priorities and prioritized_replay
                                     and self.store_rnn_state_interval > 0)
        if input_priority_shift is None and self.store_rnn_state_interval > 0:
            # The newest batch trains the sequence that started this many starts earlier.
            input_priority_shift = max(0, (self.warmup_T + self.batch_T)
                                       // self.store_rnn_state_interval - 1)
        self.input_priority_shift = int(input_priority_shift or 0)

    def _setup(self, agent: Any, n_itr: int, batch_spec: Any, mid_batch_reset: bool,
               examples: Any, async_: bool, shared_replay: bool = True) -> None:
        """As DQN's; learning starts no earlier than the first complete sequence (burn-in,
        training steps and n-step targets, from a stored state)."""
        super()._setup(agent, n_itr, batch_spec, mid_batch_reset, examples, async_,
                       shared_replay)
        needed_T = self.warmup_T + self.batch_T + self.n_step_return + self.store_rnn_state_interval
        self.min_itr_learn = max(self.min_itr_learn, -(-needed_T // batch_spec.T))

    def check_collector(self, mid_batch_reset: bool) -> None:
        """Refuse collectors that reset mid-batch: a stored recurrent state must start each
        replayed sequence, which needs wait-reset collectors."""
        if mid_batch_reset:
            raise ValueError("R2D1 trains on sequences with a recurrent state: use a wait-reset "
                             "collector (CpuWaitResetCollector / GpuWaitResetCollector)")

    @property
    def replay_batch_size(self) -> int:
        """Sequences per replayed batch (this rank's share of ``batch_B``)."""
        return self.rank_share(self.batch_B, "batch_B")

    def replay_example(self, examples: dict) -> Any:
        """One step of what the sequence replay stores, recurrent state included."""
        return SamplesToBufferRnn(observation=examples["observation"], action=examples["action"],
                                  reward=examples["reward"], done=examples["done"],
                                  prev_action=examples["action"], prev_reward=examples["reward"],
                                  prev_rnn_state=examples["agent_info"].prev_rnn_state)

    def replay_kwargs(self) -> dict:
        """DQN's replay arguments plus the sequence length, state interval and input
        priorities."""
        kwargs = dict(super().replay_kwargs(), rnn_state_interval=self.store_rnn_state_interval,
                      batch_T=self.warmup_T + self.batch_T)
        if self.prioritized_replay:
            kwargs.update(input_priorities=self.input_priorities,
                          input_priority_shift=self.input_priority_shift)
        return kwargs

    def samples_to_buffer(self, samples: Any) -> Any:
        """The replayed fields of a sampler batch, wrapped with input priorities when on."""
        to_buffer = SamplesToBufferRnn(
            observation=samples.env.observation, action=samples.agent.action,
            reward=samples.env.reward, done=samples.env.done,
            prev_action=samples.agent.prev_action, prev_reward=samples.env.prev_reward,
            prev_rnn_state=samples.agent.agent_info.prev_rnn_state)
        if self.input_priorities:
            return PrioritiesSamplesToBuffer(priorities=self.compute_input_priorities(samples),
                                             samples=to_buffer)
        return to_buffer

    def compute_input_priorities(self, samples: Any) -> torch.Tensor:
        """Per-env priority of the newest batch, from the q values the sampler recorded:
        TD errors ``h(R^(n) + gamma^n (1 - done_n) h^-1(max_a q_{t+n})) - q_t(a_t)`` over the
        batch's steps that have an n-step target inside it (up to the first episode end),
        mixed as ``eta * max + (1 - eta) * mean``. One float64 value per env, ``[B]``."""
        n = self.n_step_return
        q = samples.agent.agent_info.q.float()                      # [T, B, A]
        T = q.shape[0]
        if T <= n:  # no step has its target inside the batch
            return torch.full((q.shape[1],), float(self.default_priority or 1.0),
                              dtype=torch.float64)
        reward = samples.env.reward.float()
        done = samples.env.done.float()
        return_, done_n = discount_return_n_step(reward, done, n, self.discount)  # [T-n+1, B]
        return_, done_n = return_[:T - n], done_n[:T - n]
        q_taken = select_at_indexes(samples.agent.action[:T - n], q[:T - n])
        bootstrap = inv_value_rescale(q[n:].max(dim=-1).values, self.value_scale_eps)
        y = value_rescale(return_ + (self.discount ** n) * (1 - done_n) * bootstrap,
                          self.value_scale_eps)
        valid = valid_from_done(done[:T - n])
        td = (y - q_taken).abs() * valid
        mean_td = td.sum(0) / valid.sum(0).clamp(min=1)
        priorities = self.pri_eta * td.max(dim=0).values + (1 - self.pri_eta) * mean_td
        return priorities.to(torch.float64)  # a tensor: a device replay takes it unread

    def loss(self, batch: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """``(loss, sequence priorities)`` of a batch of replayed sequences.

        The first ``warmup_T`` steps only advance the recurrent states; the next ``batch_T``
        are regressed on rescaled n-step double-Q targets, masked after episode ends.
        """
        batch = self._to_device(batch)
        wT, bT, n = self.warmup_T, self.batch_T, self.n_step_return
        observation, prev_action, prev_reward = batch.agent_inputs
        state = batch.init_rnn_state
        # Stored per env as [B, N, H]; the model takes [N, B, H].
        state = buffer_func(state, lambda s: s.transpose(0, 1).contiguous())
        agent_state = target_state = state
        if wT > 0:  # burn-in: advance both networks' states without gradient
            with torch.no_grad():
                warm = (observation[:wT], prev_action[:wT], prev_reward[:wT])
                _, agent_state = self.agent(*warm, state)
                _, target_state = self.agent.target(*warm, state)
        train = slice(wT, wT + bT)
        qs, _ = self.agent(observation[train], prev_action[train], prev_reward[train], agent_state)
        q = select_at_indexes(batch.action[train], qs)                       # [bT, B]
        with torch.no_grad():
            ahead = slice(wT, wT + bT + n)                                   # targets at t + n
            inputs = (observation[ahead], prev_action[ahead], prev_reward[ahead])
            target_qs, _ = self.agent.target(*inputs, target_state)
            if self.double_dqn:
                online_qs, _ = self.agent(*inputs, agent_state)
                target_q = select_at_indexes(online_qs.argmax(dim=-1), target_qs)
            else:
                target_q = target_qs.max(dim=-1).values
            target_q = inv_value_rescale(target_q[n:], self.value_scale_eps)
            not_done = 1.0 - batch.done_n[train].float()
            # y = h(R^(n) + gamma^n (1 - done_n) h^-1(Q_target(s_{t+n}, a*)))
            y = value_rescale(batch.return_[train] + (self.discount ** n) * not_done * target_q,
                              self.value_scale_eps)
        delta = y - q
        losses = huber(delta, self.delta_clip)
        if self.prioritized_replay:
            losses = losses * batch.is_weights.unsqueeze(0)
        # Nothing after an episode ends, also when it ended during the burn-in.
        valid = valid_from_done(batch.done[:wT + bT].float())[wT:]
        loss = valid_mean(losses, valid)
        td = delta.detach().abs() * valid
        if self.delta_clip is not None:
            td = td.clamp(max=self.delta_clip)
        mean_td = td.sum(0) / valid.sum(0).clamp(min=1)
        priorities = self.pri_eta * td.max(dim=0).values + (1 - self.pri_eta) * mean_td
        return loss, priorities
