"""The SAC peers of scripts/bench/_cleanrl_replay.py (see there), written here from the
published algorithm (no code of CleanRL or LeanRL is copied; LeanRL's settings are):

- ``cleanrl_sac``: CleanRL's ``sac_continuous_action`` loop: one env, one critic step of batch
  256 per env step after ``learning_starts``, twin critics (lr 1e-3) with targets updated
  every step (tau 0.005), the tanh-squashed Gaussian actor (lr 3e-4) and the learned
  temperature (lr 1e-3, target entropy -|A|) updated twice every second step, on the batch
  of that step; a host numpy replay, batches moved to the device per step, ``alpha`` read
  back with ``.item()`` after each temperature step and the losses every 100 steps.
- ``leanrl_sac``: the same algorithm with LeanRL's method: the replay on the device (one row
  per transition, copied in from page-locked memory), the policy step, the critic step
  (sampling, loss, backward, fused Adam, target update) and the actor and temperature steps
  each a fixed-shape function under ``torch.compile``, captured in a CUDA graph (GraphedCall
  of scripts/bench/_cleanrl.py) and replayed; capturable fused Adam; alpha stays on the
  device; nothing read back per step but the action. On the CPU: no graphs, compile optional.
"""
from __future__ import annotations

import copy
import math
from collections.abc import Callable

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from _cleanrl import GraphedCall

SAC_HP = dict(gamma=0.99, tau=0.005, batch_size=256, policy_lr=3e-4, q_lr=1e-3,
              policy_frequency=2, target_network_frequency=1)
LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0
HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


class Actor(nn.Module):
    """256-256 MLP to the mean and the log-std of a Gaussian, the log-std squashed by tanh
    into [LOG_STD_MIN, LOG_STD_MAX]; actions tanh-squashed and rescaled to the box."""

    def __init__(self, obs_dim: int, act_dim: int, low: np.ndarray, high: np.ndarray):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(obs_dim, 256), nn.ReLU(), nn.Linear(256, 256),
                                  nn.ReLU())
        self.mean, self.log_std = nn.Linear(256, act_dim), nn.Linear(256, act_dim)
        self.register_buffer("scale", torch.tensor((high - low) / 2.0, dtype=torch.float32))
        self.register_buffer("bias", torch.tensor((high + low) / 2.0, dtype=torch.float32))

    def sample(self, obs: torch.Tensor, noise: torch.Tensor) -> tuple:
        """(action, log pi(action | obs)) for standard-normal ``noise`` (reparameterized):
        u = mean + std noise, a = tanh(u) scale + bias,
        log pi = sum(log N(u; mean, std) - log(scale (1 - tanh(u)^2) + 1e-6))."""
        hidden = self.body(obs)
        mean = self.mean(hidden)
        log_std = torch.tanh(self.log_std(hidden))
        log_std = LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (log_std + 1)
        squashed = torch.tanh(mean + log_std.exp() * noise)
        log_prob = (-0.5 * noise.pow(2) - log_std - HALF_LOG_2PI
                    - torch.log(self.scale * (1 - squashed.pow(2)) + 1e-6))
        return squashed * self.scale + self.bias, log_prob.sum(-1, keepdim=True)


class SoftQ(nn.Module):
    """Q(s, a): a 256-256 MLP on the concatenated observation and action."""

    def __init__(self, obs_dim: int, act_dim: int):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(obs_dim + act_dim, 256), nn.ReLU(),
                                 nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 1))

    def forward(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        return self.net(torch.cat([obs, action], -1))


class SacNets:
    """Actor, twin critics and their targets, the learned log-temperature and the three Adam
    optimizers (critics and temperature at q_lr, actor at policy_lr)."""

    def __init__(self, env, device: torch.device, hp: dict, **adam):
        obs_dim, act_dim = env.observation_space.shape[0], env.action_space.shape[0]
        self.obs_dim, self.act_dim = obs_dim, act_dim
        self.actor = Actor(obs_dim, act_dim, env.action_space.low,
                           env.action_space.high).to(device)
        self.qf1, self.qf2 = SoftQ(obs_dim, act_dim).to(device), SoftQ(obs_dim, act_dim).to(device)
        self.qf1_t, self.qf2_t = copy.deepcopy(self.qf1), copy.deepcopy(self.qf2)
        self.q_params = list(self.qf1.parameters()) + list(self.qf2.parameters())
        self.target_params = list(self.qf1_t.parameters()) + list(self.qf2_t.parameters())
        for p in self.target_params:
            p.requires_grad_(False)
        self.log_alpha = torch.zeros(1, device=device, requires_grad=True)
        self.target_entropy = -float(act_dim)
        self.q_opt = torch.optim.Adam(self.q_params, lr=hp["q_lr"], **adam)
        self.actor_opt = torch.optim.Adam(self.actor.parameters(), lr=hp["policy_lr"], **adam)
        self.alpha_opt = torch.optim.Adam([self.log_alpha], lr=hp["q_lr"], **adam)

    def critic_loss(self, obs, next_obs, actions, rewards, dones, noise, alpha, gamma):
        """sum_i (Q_i(s, a) - y)^2 / B, y = r + gamma (1 - done)
        (min_i Q_i,target(s', a') - alpha log pi(a'|s')), a' ~ pi(s')."""
        with torch.no_grad():
            next_actions, next_log_pi = self.actor.sample(next_obs, noise)
            min_target = torch.min(self.qf1_t(next_obs, next_actions),
                                   self.qf2_t(next_obs, next_actions)) - alpha * next_log_pi
            y = rewards + (1 - dones) * gamma * min_target.view(-1)
        return (F.mse_loss(self.qf1(obs, actions).view(-1), y)
                + F.mse_loss(self.qf2(obs, actions).view(-1), y))

    def actor_loss(self, obs, noise, alpha):
        """E[alpha log pi(a|s) - min_i Q_i(s, a)], a ~ pi(s); and log pi for the temperature."""
        actions, log_pi = self.actor.sample(obs, noise)
        min_q = torch.min(self.qf1(obs, actions), self.qf2(obs, actions))
        return (alpha * log_pi - min_q).mean(), log_pi.detach()

    def alpha_loss(self, log_pi):
        """-E[exp(log_alpha) (log pi + target entropy)]."""
        return (-self.log_alpha.exp() * (log_pi + self.target_entropy)).mean()


def _polyak_(targets: list, sources: list, tau: float) -> None:
    with torch.no_grad():
        torch._foreach_lerp_(targets, sources, tau)  # target += tau (source - target)


def _env_step(env, action):
    """One step; the observation to continue from (reset after an episode's end) and the
    transition's own next observation and termination flag."""
    next_obs, reward, terminated, truncated, _ = env.step(action)
    following = env.reset()[0] if terminated or truncated else next_obs
    return following, next_obs, float(reward), float(terminated)


def cleanrl_sac(env, device: torch.device, observe: Callable[[int, int], bool],
                learning_starts: int, replay, seed: int = 0, hp: dict = SAC_HP) -> dict:
    """CleanRL's SAC loop on one gymnasium env until ``observe`` says stop (see the module
    docstring). ``replay``: a host replay of float32 observations and actions
    (``add(obs, next_obs, action, reward, done)``, ``sample(batch, rng, device)``)."""
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    nets = SacNets(env, device, hp)
    actor = nets.actor
    alpha = nets.log_alpha.exp().item()
    env.action_space.seed(seed)
    obs, _ = env.reset(seed=seed)
    updates, logged = 0, {}
    for step in range(10 ** 12):
        if step < learning_starts:
            action = env.action_space.sample()
        else:
            noise = torch.randn(1, nets.act_dim, device=device)
            action, _ = actor.sample(torch.Tensor(obs).unsqueeze(0).to(device), noise)
            action = action.detach().cpu().numpy()[0]
        following, next_obs, reward, terminated = _env_step(env, action)
        replay.add(obs, next_obs, action, reward, terminated)
        obs = following
        if step > learning_starts:
            b_obs, b_next, b_actions, b_rewards, b_dones = replay.sample(
                hp["batch_size"], rng, device)
            noise = torch.randn(hp["batch_size"], nets.act_dim, device=device)
            q_loss = nets.critic_loss(b_obs, b_next, b_actions, b_rewards, b_dones, noise,
                                      alpha, hp["gamma"])
            nets.q_opt.zero_grad()
            q_loss.backward()
            nets.q_opt.step()
            if step % hp["policy_frequency"] == 0:  # delayed, compensated: that many steps
                for _ in range(hp["policy_frequency"]):
                    noise = torch.randn(hp["batch_size"], nets.act_dim, device=device)
                    actor_loss, _ = nets.actor_loss(b_obs, noise, alpha)
                    nets.actor_opt.zero_grad()
                    actor_loss.backward()
                    nets.actor_opt.step()
                    with torch.no_grad():
                        noise = torch.randn(hp["batch_size"], nets.act_dim, device=device)
                        _, log_pi = actor.sample(b_obs, noise)
                    alpha_loss = nets.alpha_loss(log_pi)
                    nets.alpha_opt.zero_grad()
                    alpha_loss.backward()
                    nets.alpha_opt.step()
                    alpha = nets.log_alpha.exp().item()
            if step % hp["target_network_frequency"] == 0:
                _polyak_(nets.target_params, nets.q_params, hp["tau"])
            if step % 100 == 0:  # CleanRL's logging reads
                logged = dict(qf_loss=q_loss.item(), actor_loss=actor_loss.item(),
                              alpha_loss=alpha_loss.item(), alpha=alpha)
            updates += 1
        if observe(step + 1, updates):
            break
    return dict(last_logged=logged)


def leanrl_sac(env, device: torch.device, observe: Callable[[int, int], bool],
               learning_starts: int, buffer_size: int, seed: int = 0, hp: dict = SAC_HP,
               compile_mode: str = "auto") -> dict:
    """The SAC loop of ``cleanrl_sac`` with LeanRL's method (see the module docstring).
    ``compile_mode``: "auto" (compile on CUDA only), "on" or "off"."""
    torch.manual_seed(seed)
    cuda = device.type == "cuda"
    use_compile = compile_mode == "on" or (compile_mode == "auto" and cuda)
    nets = SacNets(env, device, hp, fused=True, capturable=cuda)
    o, a = nets.obs_dim, nets.act_dim
    width, batch_size, gamma = 2 * o + a + 2, hp["batch_size"], hp["gamma"]
    storage = torch.zeros(buffer_size, width, device=device)  # obs|next obs|action|r|done
    staging = torch.zeros(width, pin_memory=cuda)
    copied = torch.cuda.Event() if cuda else None
    filled = torch.zeros((), device=device)
    batch = torch.zeros(batch_size, width, device=device)
    obs_now = torch.zeros(1, o, device=device)
    host_obs = torch.zeros(1, o, pin_memory=cuda)
    host_action = torch.zeros(1, a, pin_memory=cuda)
    act_noise = torch.zeros(1, a, device=device)
    q_noise, pi_noise = torch.zeros(batch_size, a, device=device), torch.zeros(
        batch_size, a, device=device)
    alpha = nets.log_alpha.detach().exp()  # a device tensor, refreshed in place
    q_loss_sum = torch.zeros((), device=device)
    policy, critic_loss, actor_loss = nets.actor.sample, nets.critic_loss, nets.actor_loss
    if use_compile:
        policy, critic_loss = torch.compile(policy), torch.compile(critic_loss)
        actor_loss = torch.compile(actor_loss)

    def act():
        act_noise.normal_()
        with torch.no_grad():
            return policy(obs_now, act_noise)[0]

    def critic_step():
        idx = (torch.rand(batch_size, device=device) * filled).long()
        torch.index_select(storage, 0, idx, out=batch)
        q_noise.normal_()
        nets.q_opt.zero_grad(set_to_none=True)
        loss = critic_loss(batch[:, :o], batch[:, o:2 * o], batch[:, 2 * o:2 * o + a],
                           batch[:, -2], batch[:, -1], q_noise, alpha, gamma)
        loss.backward()
        nets.q_opt.step()
        _polyak_(nets.target_params, nets.q_params, hp["tau"])
        q_loss_sum.add_(loss.detach())

    def actor_steps():
        for p in nets.q_params:  # the critics' gradients of the actor loss are never used
            p.requires_grad_(False)
        for _ in range(hp["policy_frequency"]):
            pi_noise.normal_()
            nets.actor_opt.zero_grad(set_to_none=True)
            loss, log_pi = actor_loss(batch[:, :o], pi_noise, alpha)
            loss.backward()
            nets.actor_opt.step()
            nets.alpha_opt.zero_grad(set_to_none=True)
            nets.alpha_loss(log_pi).backward()
            nets.alpha_opt.step()
            with torch.no_grad():
                alpha.copy_(nets.log_alpha.exp())
        for p in nets.q_params:
            p.requires_grad_(True)

    graphed_act, graphed_critic, graphed_actor = (GraphedCall(act, cuda),
                                                  GraphedCall(critic_step, cuda),
                                                  GraphedCall(actor_steps, cuda))
    env.action_space.seed(seed)
    obs, _ = env.reset(seed=seed)
    row = staging.numpy()
    updates = 0
    for step in range(10 ** 12):
        if step < learning_starts:
            action = env.action_space.sample()
        else:
            host_obs.numpy()[0] = obs
            obs_now.copy_(host_obs, non_blocking=True)
            host_action.copy_(graphed_act(), non_blocking=True)
            if cuda:  # the one host synchronisation per step: the action comes back
                torch.cuda.current_stream().synchronize()
            action = host_action.numpy()[0].copy()
        following, next_obs, reward, terminated = _env_step(env, action)
        if copied is not None:
            copied.synchronize()  # the previous transition has left the staging row
        row[:o], row[o:2 * o], row[2 * o:2 * o + a] = obs, next_obs, action
        row[-2], row[-1] = reward, terminated
        storage[step % buffer_size].copy_(staging, non_blocking=True)
        if copied is not None:
            copied.record()
        obs = following
        if step > learning_starts:
            filled.fill_(min(step + 1, buffer_size))
            graphed_critic()
            if step % hp["policy_frequency"] == 0:
                graphed_actor()
            updates += 1
        if observe(step + 1, updates):
            break
    if cuda:
        torch.cuda.synchronize()
    calls = (("act", graphed_act), ("critic", graphed_critic), ("actor", graphed_actor))
    return dict(compiled=use_compile,
                cuda_graphs={n: (g.graph is not None if cuda else None) for n, g in calls},
                graph_fallbacks={n: g.fallback_reason for n, g in calls if g.fallback_reason},
                mean_q_loss=(q_loss_sum / max(updates, 1)).item())
