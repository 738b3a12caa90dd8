"""The CleanRL-style PPO peers of scripts/bench/bench_atari_train.py, written here from the
published algorithms (no code of CleanRL or LeanRL is copied): one PPO workload, two loops.

- ``cleanrl_ppo``: CleanRL's ``ppo_atari_envpool`` algorithm as written there: float32
  observation storage, per-step inference under ``no_grad`` through
  ``torch.distributions.Categorical``, GAE on the device, epochs of shuffled minibatches with
  normalized advantages, clipped surrogate, clipped value loss, entropy bonus, gradient-norm
  clipping and Adam (eps 1e-5), the diagnostics CleanRL logs read with ``.item()`` in the
  minibatch loop (each one waits for the device).
- ``leanrl_ppo``: the same algorithm with LeanRL's published method (torch.compile to fuse the
  policy step and the loss; CUDA graphs to replay the fixed-shape work without launch or
  Python overhead; a capturable fused Adam whose learning rate is a device tensor; nothing
  read back to the host inside the loop but the actions). Here the policy step, the
  bootstrap-and-GAE pass and the whole update step (loss, backward, gradient clipping, Adam)
  are each captured in a ``torch.cuda.CUDAGraph`` by hand, around compiled functions;
  frames stay uint8 until the network reads them; minibatch indices are drawn on the
  device. On the CPU there are no graphs (and compilation is optional, ``compile_mode``).

Both loops run on any gymnasium-style vector environment; ``make_ale_vector_env`` builds
ale-py's ``AtariVectorEnv`` with the settings of the rest of the benchmark (EnvPool's
``Pong-v5`` as CleanRL configures it: 84x84 grayscale, 4 stacked frames, frame skip 4 with
max-pooling, 30 no-op starts, fire on reset, a lost life ends the episode, rewards clipped,
no sticky actions).
"""
from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch
from torch import nn

FRAME_SKIP = 4


def make_ale_vector_env(n_envs: int, num_threads: int = 0):
    """Pong on ale-py's ``AtariVectorEnv`` (C++ threads, batched), configured as above."""
    from ale_py.vector_env import AtariVectorEnv

    return AtariVectorEnv(game="pong", num_envs=n_envs, num_threads=num_threads,
                          frameskip=FRAME_SKIP, img_height=84, img_width=84, grayscale=True,
                          stack_num=4, maxpool=True, noop_max=30, use_fire_reset=True,
                          episodic_life=True, reward_clipping=True,
                          repeat_action_probability=0.0)


def vector_env_spaces(envs) -> tuple[tuple[int, ...], int]:
    """(observation shape of one env, number of actions) of a gymnasium-style vector env."""
    obs_space = getattr(envs, "single_observation_space", envs.observation_space)
    act_space = getattr(envs, "single_action_space", envs.action_space)
    return tuple(obs_space.shape), int(act_space.n)


def _ortho(layer: nn.Module, gain: float = math.sqrt(2)) -> nn.Module:
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)
    return layer


class NatureActorCritic(nn.Module):
    """The Nature CNN (conv 32 8x8/4, 64 4x4/2, 64 3x3/1, fc 512, ReLU) with orthogonal
    init and linear policy (gain 0.01) and value (gain 1) heads, as CleanRL builds it. Frames
    in [0, 255] (uint8 or float) are scaled to [0, 1] here."""

    def __init__(self, obs_shape: tuple[int, ...], n_actions: int):
        super().__init__()
        self.body = nn.Sequential(
            _ortho(nn.Conv2d(obs_shape[0], 32, 8, stride=4)), nn.ReLU(),
            _ortho(nn.Conv2d(32, 64, 4, stride=2)), nn.ReLU(),
            _ortho(nn.Conv2d(64, 64, 3, stride=1)), nn.ReLU(),
            nn.Flatten(), _ortho(nn.Linear(64 * 7 * 7, 512)), nn.ReLU())
        self.pi = _ortho(nn.Linear(512, n_actions), 0.01)
        self.v = _ortho(nn.Linear(512, 1), 1.0)

    def hidden(self, obs: torch.Tensor) -> torch.Tensor:
        return self.body(obs.float() / 255.0)

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.v(self.hidden(obs)).squeeze(-1)

    def act(self, obs: torch.Tensor, action: torch.Tensor | None = None):
        """CleanRL's ``get_action_and_value``: (action, log-prob, entropy, value)."""
        from torch.distributions import Categorical

        hidden = self.hidden(obs)
        dist = Categorical(logits=self.pi(hidden))
        if action is None:
            action = dist.sample()
        return action, dist.log_prob(action), dist.entropy(), self.v(hidden).squeeze(-1)


def _gae_(advantages, returns, rewards, dones, values, next_value, next_done,
          gamma: float, lam: float) -> None:
    """Generalized advantage estimation into ``advantages`` and ``returns`` (in place):
    delta_t = r_t + gamma V_{t+1} (1 - d_{t+1}) - V_t;  A_t = delta_t + gamma lam (1 - d_{t+1})
    A_{t+1}; returns = A + V (``dones[t]`` flags that the observation of step t began a new
    episode, as CleanRL stores it)."""
    T = rewards.shape[0]
    running = torch.zeros_like(next_value)
    for t in reversed(range(T)):
        if t == T - 1:
            not_done, following = 1.0 - next_done, next_value
        else:
            not_done, following = 1.0 - dones[t + 1], values[t + 1]
        delta = rewards[t] + gamma * following * not_done - values[t]
        running = delta + gamma * lam * not_done * running
        advantages[t] = running
    returns.copy_(advantages + values)


def _ppo_losses(new_logprob, entropy, new_value, old_logprob, adv, returns, old_value,
                clip: float, hp: dict):
    """PPO's loss on one minibatch and its diagnostics (policy loss, value loss, entropy,
    approximate KL, clip fraction), all device tensors:
    L = -E[min(A r, A clip(r, 1-e, 1+e))] + c_v/2 E[max((V-R)^2, (V_clip-R)^2)] - c_e H,
    r = exp(log pi - log pi_old), A normalized per minibatch."""
    log_ratio = new_logprob - old_logprob
    ratio = log_ratio.exp()
    adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    policy_loss = torch.max(-adv * ratio, -adv * ratio.clamp(1 - clip, 1 + clip)).mean()
    value_clipped = old_value + (new_value - old_value).clamp(-clip, clip)
    value_loss = 0.5 * torch.max((new_value - returns) ** 2,
                                 (value_clipped - returns) ** 2).mean()
    entropy_mean = entropy.mean()
    loss = (policy_loss - hp["entropy_loss_coeff"] * entropy_mean
            + hp["value_loss_coeff"] * value_loss)
    with torch.no_grad():
        approx_kl = ((ratio - 1) - log_ratio).mean()
        clip_frac = ((ratio - 1.0).abs() > clip).float().mean()
    return loss, (policy_loss.detach(), value_loss.detach(), entropy_mean.detach(), approx_kl,
                  clip_frac)


# ---- CleanRL as written --------------------------------------------------------------------

def _reset(envs, seed: int, seed_reset: bool):
    """The first observations (EnvPool is seeded when made; its reset takes no seed)."""
    obs, _ = envs.reset(seed=seed) if seed_reset else envs.reset()
    return obs


def cleanrl_ppo(envs, n_envs: int, T: int, hp: dict, device: torch.device,
                observe: Callable[[int, int], bool], seed: int = 0, seed_reset: bool = True,
                n_iterations: int = 10 ** 9) -> dict:
    """Run CleanRL's PPO loop on ``envs`` until ``observe(env_steps, updates)`` (called at
    every iteration boundary) returns True or ``n_iterations`` ran out; returns counts.
    ``seed_reset``: pass ``seed`` to the first ``reset`` (False for EnvPool)."""
    torch.manual_seed(seed)
    np.random.seed(seed)
    obs_shape, n_actions = vector_env_spaces(envs)
    net = NatureActorCritic(obs_shape, n_actions).to(device)
    lr = hp["learning_rate"]
    optimizer = torch.optim.Adam(net.parameters(), lr=lr, eps=1e-5)
    gamma, lam, clip = hp["discount"], hp["gae_lambda"], hp["ratio_clip"]
    batch = n_envs * T
    minibatch = batch // hp["minibatches"]

    obs_buf = torch.zeros((T, n_envs) + obs_shape, device=device)
    actions = torch.zeros((T, n_envs), dtype=torch.long, device=device)
    logprobs = torch.zeros((T, n_envs), device=device)
    rewards = torch.zeros((T, n_envs), device=device)
    dones = torch.zeros((T, n_envs), device=device)
    values = torch.zeros((T, n_envs), device=device)
    advantages, returns = torch.zeros_like(rewards), torch.zeros_like(rewards)

    obs = _reset(envs, seed, seed_reset)
    next_obs = torch.as_tensor(obs, device=device, dtype=torch.float32)
    next_done = torch.zeros(n_envs, device=device)
    steps = updates = 0
    for iteration in range(1, n_iterations + 1):
        for group in optimizer.param_groups:  # linear annealing
            group["lr"] = lr * (1.0 - (iteration - 1.0) / n_iterations)
        for t in range(T):
            steps += n_envs
            obs_buf[t] = next_obs
            dones[t] = next_done
            with torch.no_grad():
                action, logprob, _, value = net.act(next_obs)
            actions[t], logprobs[t], values[t] = action, logprob, value
            obs, reward, terminated, truncated, _ = envs.step(action.cpu().numpy())
            rewards[t] = torch.as_tensor(reward, device=device, dtype=torch.float32)
            next_obs = torch.as_tensor(obs, device=device, dtype=torch.float32)
            next_done = torch.as_tensor(np.logical_or(terminated, truncated), device=device,
                                        dtype=torch.float32)
        with torch.no_grad():
            _gae_(advantages, returns, rewards, dones, values, net.value(next_obs), next_done,
                  gamma, lam)
        b_obs = obs_buf.reshape((batch,) + obs_shape)
        b_actions, b_logprobs = actions.reshape(-1), logprobs.reshape(-1)
        b_adv, b_returns, b_values = (advantages.reshape(-1), returns.reshape(-1),
                                      values.reshape(-1))
        order = np.arange(batch)
        for _ in range(hp["epochs"]):
            np.random.shuffle(order)
            for start in range(0, batch, minibatch):
                idx = torch.as_tensor(order[start:start + minibatch], device=device)
                _, new_logprob, entropy, new_value = net.act(b_obs[idx], b_actions[idx])
                loss, diagnostics = _ppo_losses(new_logprob, entropy, new_value,
                                                b_logprobs[idx], b_adv[idx], b_returns[idx],
                                                b_values[idx], clip, hp)
                _approx_kl, _clip_frac = diagnostics[3].item(), diagnostics[4].item()
                optimizer.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(net.parameters(), hp["clip_grad_norm"])
                optimizer.step()
                updates += 1
        if observe(steps, updates):
            break
    return dict(steps=steps, updates=updates)


# ---- LeanRL's method -------------------------------------------------------------------------

class GraphedCall:
    """``fn()`` (no arguments: it reads and writes fixed tensors) run eagerly for ``warmup``
    calls on a side stream, then captured once into a CUDA graph and replayed from then on.
    With ``enabled`` False (the CPU) it simply calls ``fn``. If the capture fails, the error
    is kept in ``fallback_reason`` and ``fn`` runs eagerly from then on."""

    def __init__(self, fn: Callable[[], object], enabled: bool, warmup: int = 3):
        self.fn, self.enabled, self.warmup = fn, enabled, warmup
        self.calls, self.graph, self.out, self.fallback_reason = 0, None, None, None

    def __call__(self):
        if not self.enabled:
            return self.fn()
        if self.graph is not None:
            self.graph.replay()
            return self.out
        if self.calls < self.warmup:  # compilation, lazy state (Adam's moments) and autotuning
            self.calls += 1
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                out = self.fn()
            torch.cuda.current_stream().wait_stream(side)
            return out
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph):
                self.out = self.fn()
        except Exception as error:  # noqa: BLE001 - run on without graphs, and say why
            torch.cuda.synchronize()
            self.enabled, self.fallback_reason = False, f"{type(error).__name__}: {error}"
            return self.fn()
        self.graph = graph
        graph.replay()  # capturing records the work without running it
        return self.out


def leanrl_ppo(envs, n_envs: int, T: int, hp: dict, device: torch.device,
               observe: Callable[[int, int], bool], seed: int = 0, seed_reset: bool = True,
               compile_mode: str = "auto", n_iterations: int = 10 ** 9) -> dict:
    """The loop of ``cleanrl_ppo`` with LeanRL's method (see the module docstring).
    ``compile_mode``: "auto" (compile on CUDA only), "on" or "off". Returns counts and what
    ran: whether compiled, whether each graph was captured, the mean diagnostics."""
    torch.manual_seed(seed)
    np.random.seed(seed)
    cuda = device.type == "cuda"
    use_compile = compile_mode == "on" or (compile_mode == "auto" and cuda)
    obs_shape, n_actions = vector_env_spaces(envs)
    net = NatureActorCritic(obs_shape, n_actions).to(device)
    lr = hp["learning_rate"]
    lr_now = torch.tensor(lr, device=device)  # a tensor: changing it needs no recapture
    optimizer = torch.optim.Adam(net.parameters(), lr=lr_now, eps=1e-5, fused=True,
                                 capturable=cuda)
    gamma, lam, clip = hp["discount"], hp["gae_lambda"], hp["ratio_clip"]
    batch = n_envs * T
    minibatch = batch // hp["minibatches"]

    def zeros(*shape, dtype=torch.float32, pinned=False):
        if pinned:  # host staging: page-locked where a device copies from it
            return torch.zeros(shape, dtype=dtype, pin_memory=cuda)
        return torch.zeros(shape, dtype=dtype, device=device)

    obs_buf = zeros(T, n_envs, *obs_shape, dtype=torch.uint8)
    actions = zeros(T, n_envs, dtype=torch.long)
    logprobs, values = zeros(T, n_envs), zeros(T, n_envs)
    rewards, dones = zeros(T, n_envs), zeros(T, n_envs)
    advantages, returns = zeros(T, n_envs), zeros(T, n_envs)
    next_obs, next_done = zeros(n_envs, *obs_shape, dtype=torch.uint8), zeros(n_envs)
    noise = zeros(n_envs, n_actions)
    mb_index = zeros(minibatch, dtype=torch.long)
    diagnostics_sum = zeros(5)
    host_obs = zeros(n_envs, *obs_shape, dtype=torch.uint8, pinned=True)
    host_action = zeros(n_envs, dtype=torch.long, pinned=True)
    host_rewards, host_dones = zeros(T, n_envs, pinned=True), zeros(T, n_envs, pinned=True)
    host_next_done = zeros(n_envs, pinned=True)
    b_obs = obs_buf.view((batch,) + obs_shape)
    b_actions, b_logprobs, b_values = actions.view(-1), logprobs.view(-1), values.view(-1)
    b_adv, b_returns = advantages.view(-1), returns.view(-1)
    params = list(net.parameters())

    def policy_step(obs, uniform):
        """Action by the Gumbel-max trick (argmax of logits + Gumbel noise = a draw from the
        softmax), its log-probability and the value; the noise comes in from outside so that
        the compiled code holds no random-number state."""
        hidden = net.hidden(obs)
        logits = net.pi(hidden)
        gumbel = -torch.log(-torch.log(uniform.clamp(1e-12, 1.0 - 1e-7)))
        action = torch.argmax(logits + gumbel, dim=-1)
        logprob = torch.log_softmax(logits, -1).gather(-1, action.unsqueeze(-1)).squeeze(-1)
        return action, logprob, net.v(hidden).squeeze(-1)

    def minibatch_loss(idx):
        hidden = net.hidden(b_obs[idx])
        log_probs = torch.log_softmax(net.pi(hidden), -1)
        new_logprob = log_probs.gather(-1, b_actions[idx].unsqueeze(-1)).squeeze(-1)
        entropy = -(log_probs.exp() * log_probs).sum(-1)
        new_value = net.v(hidden).squeeze(-1)
        loss, diagnostics = _ppo_losses(new_logprob, entropy, new_value, b_logprobs[idx],
                                        b_adv[idx], b_returns[idx], b_values[idx], clip, hp)
        return loss, torch.stack(diagnostics)

    if use_compile:
        policy_step = torch.compile(policy_step)
        minibatch_loss = torch.compile(minibatch_loss)

    def act():
        noise.uniform_()
        return policy_step(next_obs, noise)

    def bootstrap_and_gae():
        with torch.no_grad():
            _gae_(advantages, returns, rewards, dones, values, net.value(next_obs), next_done,
                  gamma, lam)

    def update():
        optimizer.zero_grad(set_to_none=True)  # the captured backward writes fresh gradients
        loss, diagnostics = minibatch_loss(mb_index)
        loss.backward()
        nn.utils.clip_grad_norm_(params, hp["clip_grad_norm"], foreach=True)
        optimizer.step()
        diagnostics_sum.add_(diagnostics)

    graphed_act = GraphedCall(lambda: _no_grad_call(act), cuda)
    graphed_gae = GraphedCall(bootstrap_and_gae, cuda)
    graphed_update = GraphedCall(update, cuda)

    host_obs.numpy()[...] = _reset(envs, seed, seed_reset)
    next_obs.copy_(host_obs, non_blocking=True)
    steps = updates = 0
    for iteration in range(1, n_iterations + 1):
        lr_now.fill_(lr * (1.0 - (iteration - 1.0) / n_iterations))  # linear annealing
        for t in range(T):
            steps += n_envs
            obs_buf[t].copy_(next_obs)
            action, logprob, value = graphed_act()
            actions[t].copy_(action)
            logprobs[t].copy_(logprob)
            values[t].copy_(value)
            host_action.copy_(action, non_blocking=True)
            if cuda:  # the one host synchronisation per step: the actions come back
                torch.cuda.current_stream().synchronize()
            host_dones[t].copy_(host_next_done)
            obs, reward, terminated, truncated, _ = envs.step(host_action.numpy())
            host_obs.numpy()[...] = obs
            host_rewards.numpy()[t] = reward
            host_next_done.numpy()[...] = np.logical_or(terminated, truncated)
            next_obs.copy_(host_obs, non_blocking=True)
        rewards.copy_(host_rewards, non_blocking=True)
        dones.copy_(host_dones, non_blocking=True)
        next_done.copy_(host_next_done, non_blocking=True)
        graphed_gae()
        for _ in range(hp["epochs"]):
            order = torch.argsort(torch.rand(batch, device=device))  # drawn on the device
            for start in range(0, batch, minibatch):
                mb_index.copy_(order[start:start + minibatch])
                graphed_update()
                updates += 1
        if observe(steps, updates):
            break
    if cuda:
        torch.cuda.synchronize()
    mean = (diagnostics_sum / max(updates, 1)).tolist()  # read once, after the loop
    graphs = {name: (g.graph is not None if cuda else None)
              for name, g in (("act", graphed_act), ("gae", graphed_gae),
                              ("update", graphed_update))}
    fallbacks = {name: g.fallback_reason for name, g in (("act", graphed_act),
                                                         ("gae", graphed_gae),
                                                         ("update", graphed_update))
                 if g.fallback_reason}
    return dict(steps=steps, updates=updates, compiled=use_compile, cuda_graphs=graphs,
                graph_fallbacks=fallbacks,
                diagnostics=dict(zip(("policy_loss", "value_loss", "entropy", "approx_kl",
                                      "clip_frac"), mean)))


def _no_grad_call(fn: Callable[[], object]):
    with torch.no_grad():
        return fn()
