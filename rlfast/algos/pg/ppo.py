"""Proximal Policy Optimization: several epochs of clipped-ratio minibatch updates per batch."""
from __future__ import annotations

from collections import namedtuple
from typing import Any

import torch

from rlfast.algos.graph_step import check_compile
from rlfast.algos.pg.base import (STEP_FIELDS, LossBatch, LossInfo, LossInputs, OptInfo,
                                  PolicyGradientAlgo, RnnLossInputs, approx_kl,
                                  pg_hyperparameters)
from rlfast.utils.checks import check_int
from rlfast.utils.distributed import pooled_valid_mean, rank_loss_count
from rlfast.utils.tensor import valid_mean

__all__ = ["PPO", "PpoOptInfo", "PpoLossInfo", "LossInputs", "RnnLossInputs"]

MINIBATCH_SEED_OFFSET = 0x5EED_0B  # the minibatch generator's seed: the run's plus this
PPO_STEP_FIELDS = STEP_FIELDS + ("clipFrac",)
PpoOptInfo = namedtuple("PpoOptInfo", OptInfo._fields + ("clipFrac",))  # the logged order
PpoLossInfo = namedtuple("PpoLossInfo", LossInfo._fields + ("clipFrac",))


class PPO(PolicyGradientAlgo):
    """PPO with the clipped surrogate objective.

    Feedforward agents draw minibatches of single time steps from the flattened ``T*B`` batch;
    recurrent agents draw minibatches of whole environment columns (sequences of length T)
    starting from the recurrent state the sampler had. ``linear_lr_schedule`` anneals the
    learning rate linearly to zero over the run, or over ``lr_anneal_steps`` environment
    steps when that is given (a run shorter than a published one can then follow the
    published schedule: CleanRL's and the zoo's Atari PPO anneal over 10M agent steps, so
    their curves at 2.5M steps come from a rate still 0.75 of its start; past
    ``lr_anneal_steps`` the rate stays zero). ``compile=True`` runs each feedforward
    gradient step as a :class:`~rlfast.algos.graph_step.GraphStep`: the loss under
    ``torch.compile`` and, on CUDA, the whole step captured in one CUDA graph (LeanRL's
    approach); recurrent agents get the compiled loss only. ``target_kl`` stops the epochs
    of an iteration early once an epoch's mean approximate KL exceeds it (one host read per
    epoch; off by default). ``value_norm``, ``value_loss`` and ``huber_delta`` are the MAPPO
    code's value normalization and Huber value loss (off by default; see
    :class:`PolicyGradientAlgo`). The other arguments are those of :class:`PolicyGradientAlgo`.
    """

    OptInfo = PpoOptInfo
    opt_info_fields = tuple(PpoOptInfo._fields)
    step_fields = PPO_STEP_FIELDS

    def __init__(self, discount: float = 0.99, learning_rate: float = 0.001,
                 value_loss_coeff: float = 1.0, entropy_loss_coeff: float = 0.01,
                 OptimCls: type = torch.optim.Adam, optim_kwargs: dict | None = None,
                 clip_grad_norm: float = 1.0, initial_optim_state_dict: dict | None = None,
                 gae_lambda: float = 1, minibatches: int = 4, epochs: int = 4,
                 ratio_clip: float = 0.1, linear_lr_schedule: bool = True,
                 normalize_advantage: bool = False, bootstrap_timelimit: bool = True,
                 normalize_reward: bool = False, compile: bool = False,
                 target_kl: float | None = None, value_norm: bool = False,
                 value_loss: str = "mse", huber_delta: float = 10.0,
                 lr_anneal_steps: int | None = None):
        super().__init__(**pg_hyperparameters(locals()))
        self.lr_anneal_steps = (None if lr_anneal_steps is None else
                                check_int(lr_anneal_steps, "lr_anneal_steps", minimum=1,
                                          owner="PPO"))
        if target_kl is not None and not (isinstance(target_kl, (int, float))
                                          and not isinstance(target_kl, bool) and target_kl > 0):
            raise ValueError(f"PPO: target_kl must be a positive number or None; "
                             f"got {target_kl!r}")
        self.target_kl = None if target_kl is None else float(target_kl)
        self.compile = check_compile(compile, "PPO")
        self.minibatches = check_int(minibatches, "minibatches", minimum=1, owner="PPO")
        self.epochs = check_int(epochs, "epochs", minimum=1, owner="PPO")
        self.ratio_clip = ratio_clip
        self.linear_lr_schedule = linear_lr_schedule

    def initialize(self, *args: Any, **kwargs: Any) -> None:
        """As :meth:`PolicyGradientAlgo.initialize`, plus the learning-rate schedule, which
        reaches zero after ``n_itr`` iterations, or after the iterations that make up
        ``lr_anneal_steps`` environment steps (every rank's batch counted)."""
        super().initialize(*args, **kwargs)
        # The minibatch order's own generator, on the learner's device: the global one is
        # shared with the sampler, which may draw from it in another thread at the same time
        # (runner.overlap), and the order must not depend on that interleaving. Seeded from
        # the run's seed (torch.initial_seed), saved in snapshots with the algorithm's state.
        self.minibatch_rng = torch.Generator(device=self.agent.device)
        self.minibatch_rng.manual_seed((torch.initial_seed() + MINIBATCH_SEED_OFFSET) % 2 ** 63)
        self.lr_scheduler = None
        if self.linear_lr_schedule:
            n_itr = max(int(self.n_itr), 1)
            if self.lr_anneal_steps is not None:
                itr_steps = self.batch_spec.size * self.world_size
                n_itr = max(-(-self.lr_anneal_steps // itr_steps), 1)
            self.lr_scheduler = torch.optim.lr_scheduler.LambdaLR(
                self.optimizer, lr_lambda=lambda itr: max(n_itr - itr, 0) / n_itr)

    def optimize_agent(self, itr: int, samples: Any = None,
                       sampler_itr: int | None = None) -> PpoOptInfo:
        """``epochs`` passes of ``minibatches`` clipped-surrogate gradient steps over the batch.

        Returns the per-minibatch loss, gradient norm, entropy, perplexity, approximate KL
        and clip fraction, and the critic's explained variance on the batch (once).

        The batch crosses to the agent's device once; minibatch indices are drawn there
        (``torch.randperm`` on the device); every diagnostic stays a device tensor until one
        read at the end of the call. With a fused optimizer (the default for Adam) nothing
        else is read on the host, so the GPU is never stalled inside the epochs; non-finite
        steps are refused on the device and reported after the read (see
        :meth:`~PolicyGradientAlgo.gradient_step`).
        """
        batch = self.loss_batch(samples, flatten=True)  # feedforward: [T*B] steps
        mb_size = max(batch.n_items // self.minibatches, 1)
        step = self.gradient_step(batch, mb_size)  # eager, recurrent or compiled: one call
        counter_at_begin = self.update_counter
        for epoch in range(self.epochs):
            if epoch and self._kl_exceeded(batch, mb_size):
                break
            order = torch.randperm(batch.n_items, device=self.agent.device,
                                   generator=self.minibatch_rng)
            for idxs in order.split(mb_size):
                step(itr, idxs)
                self.update_counter += 1
        records = self.guarded_steps.end_counted(itr, self, counter_at_begin)
        if self.lr_scheduler is not None:
            self.lr_scheduler.step()
        return self.opt_info(records)

    def state_dict(self) -> dict:
        """Also the minibatch generator's state (exact resume of a serial run)."""
        state = super().state_dict()
        if getattr(self, "minibatch_rng", None) is not None:
            state["minibatch_rng"] = self.minibatch_rng.get_state()
        return state

    def load_state_dict(self, state: Any) -> None:
        super().load_state_dict(state)
        if getattr(self, "minibatch_rng", None) is not None and "minibatch_rng" in state:
            self.minibatch_rng.set_state(state["minibatch_rng"].cpu())

    def _kl_exceeded(self, batch: LossBatch, mb_size: int) -> bool:
        """With ``target_kl``: whether the last epoch's mean approximate KL exceeded it (the
        one host read an epoch may make)."""
        if self.target_kl is None:
            return False
        steps_per_epoch = -(-batch.n_items // mb_size)
        return self.guarded_steps.mean_of_last("approxKl", steps_per_epoch) > self.target_kl

    def loss(self, agent_inputs: Any, action: torch.Tensor, return_: torch.Tensor,
             advantage: torch.Tensor, valid: torch.Tensor, old_dist_info: Any,
             init_rnn_state: Any = None,
             reset: torch.Tensor | None = None) -> tuple[torch.Tensor, PpoLossInfo]:
        """The PPO loss of one minibatch and its detached terms.

        ``old_dist_info`` is the sampler's action distribution; the ratio of the current one
        to it drives the clipped surrogate, the approximate KL and the clip fraction (the
        share of valid steps whose ratio left ``[1 - ratio_clip, 1 + ratio_clip]``).
        Recurrent agents pass ``init_rnn_state`` (``[N, B, H]``) and ``reset`` (``[T, B]``,
        where episodes start inside the sequences; see ``episode_starts``).
        """
        if init_rnn_state is not None:
            dist_info, value, _ = self.agent(*agent_inputs, init_rnn_state, reset)
        else:
            dist_info, value = self.agent(*agent_inputs)
        dist = self.agent.distribution
        # Clipped surrogate: -E[min(r A, clip(r, 1-eps, 1+eps) A)], r = pi(a|s) / pi_old(a|s)
        ratio = dist.likelihood_ratio(action, old_dist_info=old_dist_info, new_dist_info=dist_info)
        surrogate = ratio * advantage
        clipped = torch.clamp(ratio, 1.0 - self.ratio_clip, 1.0 + self.ratio_clip) * advantage
        n = rank_loss_count(valid)  # under SyncRl: means over every rank's valid steps
        pi_loss = -pooled_valid_mean(torch.min(surrogate, clipped), valid, n)
        # Value loss: c_v * E[0.5 (V(s) - R)^2] (or Huber; R normalized with value_norm)
        value_loss = self.value_loss_coeff * pooled_valid_mean(self.value_error(value, return_),
                                                               valid, n)
        # Entropy bonus: -c_H * E[H(pi(.|s))]
        entropy = pooled_valid_mean(dist.entropy(dist_info), valid, n)
        loss = pi_loss + value_loss - self.entropy_loss_coeff * entropy
        with torch.no_grad():
            clipped_steps = ((ratio - 1).abs() > self.ratio_clip).to(ratio.dtype)
            info = PpoLossInfo(piLoss=pi_loss.detach(), valueLoss=value_loss.detach(),
                               entropy=entropy.detach(),
                               perplexity=dist.mean_perplexity(dist_info, valid).detach(),
                               approxKl=approx_kl(ratio, valid),
                               clipFrac=valid_mean(clipped_steps, valid))
        return loss, info
