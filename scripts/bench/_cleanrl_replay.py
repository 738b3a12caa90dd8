#!/usr/bin/env python
"""The replay-based peers of scripts/bench/bench_gpu.sh's replay section, written here from the
published algorithms (no code of CleanRL or LeanRL is copied; their hyperparameters are):

- ``cleanrl_dqn``: CleanRL's ``dqn_atari`` loop: Nature-CNN Q-network, epsilon-greedy with
  CleanRL's linear schedule (1 -> 0.01 over 10% of 10M steps), one gradient step of batch 32
  every 4 iterations (replay ratio 8 with one env), MSE TD loss on ``r + gamma max Q'(s')``,
  Adam lr 1e-4, hard target copy every 1000 iterations; uint8 frames in a host numpy replay,
  each batch moved to the device as it is sampled; the loss and Q mean read with ``.item()``
  every 100 iterations, as CleanRL logs them. Pong runs on ale-py's AtariVectorEnv with one
  env (scripts/bench/_cleanrl.py's settings: CleanRL's wrappers in C++, a faster env than
  CleanRL's own Python wrappers, so a stricter peer).
- ``cleanrl_sac`` and ``leanrl_sac`` (scripts/bench/_cleanrl_sac.py): CleanRL's
  ``sac_continuous_action`` loop at LeanRL's settings, as written there (host numpy replay,
  eager PyTorch) and with LeanRL's method (device replay, torch.compile, CUDA graphs,
  capturable fused Adam).

Run as a script (``--algo dqn|sac --style cleanrl|leanrl``), each loop measures its own window:
it opens ``--warmup`` s after the ``--settle`` th gradient step (compilation and graph capture
done) and lasts ``--seconds``; env steps/s and gradient steps/s over it go to stdout and
``--json``.
"""
from __future__ import annotations

import argparse
import copy
import os
import sys
import time
from collections.abc import Callable

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _cleanrl import make_ale_vector_env, vector_env_spaces  # noqa: E402
from _cleanrl_sac import cleanrl_sac, leanrl_sac  # noqa: E402
from _common import Window, print_result, write_json  # noqa: E402

DQN_HP = dict(learning_rate=1e-4, gamma=0.99, batch_size=32, train_frequency=4,
              target_network_frequency=1000, tau=1.0, start_e=1.0, end_e=0.01,
              exploration_fraction=0.1, total_timesteps=10_000_000)


class HostReplay:
    """A ring of transitions in host numpy arrays (CleanRL's replay keeps its arrays on the
    host and moves each sampled batch to the device)."""

    def __init__(self, size: int, obs_shape: tuple, obs_dtype, action_shape: tuple,
                 action_dtype):
        self.obs = np.zeros((size, *obs_shape), obs_dtype)
        self.next_obs = np.zeros((size, *obs_shape), obs_dtype)
        self.actions = np.zeros((size, *action_shape), action_dtype)
        self.rewards = np.zeros(size, np.float32)
        self.dones = np.zeros(size, np.float32)
        self.size, self.pos, self.full = size, 0, False

    def add(self, obs, next_obs, action, reward, done) -> None:
        i = self.pos
        self.obs[i], self.next_obs[i], self.actions[i] = obs, next_obs, action
        self.rewards[i], self.dones[i] = reward, done
        self.pos = (i + 1) % self.size
        self.full = self.full or self.pos == 0

    def sample(self, batch: int, rng: np.random.Generator, device: torch.device) -> tuple:
        idx = rng.integers(0, self.size if self.full else self.pos, batch)
        return tuple(torch.tensor(a[idx], device=device) for a in
                     (self.obs, self.next_obs, self.actions, self.rewards, self.dones))


# ---- DQN on Atari -------------------------------------------------------------------------

class NatureQNetwork(nn.Module):
    """Conv 32 8x8/4, 64 4x4/2, 64 3x3/1, fc 512, one Q-value per action; frames / 255."""

    def __init__(self, obs_shape: tuple, n_actions: int):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(obs_shape[0], 32, 8, stride=4), nn.ReLU(),
            nn.Conv2d(32, 64, 4, stride=2), nn.ReLU(), nn.Conv2d(64, 64, 3, stride=1), nn.ReLU(),
            nn.Flatten(), nn.Linear(64 * 7 * 7, 512), nn.ReLU(), nn.Linear(512, n_actions))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x / 255.0)


def cleanrl_dqn(envs, device: torch.device, observe: Callable[[int, int], bool],
                learning_starts: int, buffer_size: int, seed: int = 0,
                hp: dict = DQN_HP) -> dict:
    """CleanRL's DQN loop on a gymnasium-style vector env until ``observe`` says stop.
    ``envs`` resets the step after a done (next-step autoreset): that step's transition is
    not stored. Steps and iterations count as CleanRL's ``global_step`` (one per iteration)."""
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    obs_shape, n_actions = vector_env_spaces(envs)
    n_envs = envs.num_envs
    q_net = NatureQNetwork(obs_shape, n_actions).to(device)
    target = copy.deepcopy(q_net)
    optimizer = torch.optim.Adam(q_net.parameters(), lr=hp["learning_rate"])
    replay = HostReplay(buffer_size, obs_shape, np.uint8, (), np.int64)
    explore_steps = hp["exploration_fraction"] * hp["total_timesteps"]
    obs, _ = envs.reset(seed=seed)
    was_done = np.zeros(n_envs, bool)
    updates, logged = 0, {}
    for step in range(hp["total_timesteps"]):
        # epsilon: linear from start_e to end_e over explore_steps
        eps = max(hp["end_e"], hp["start_e"] + (hp["end_e"] - hp["start_e"]) * step
                  / explore_steps)
        if rng.random() < eps:
            actions = rng.integers(0, n_actions, n_envs)
        else:
            q_values = q_net(torch.Tensor(obs).to(device))
            actions = torch.argmax(q_values, dim=1).cpu().numpy()
        next_obs, rewards, terminated, truncated, _ = envs.step(actions)
        for i in np.flatnonzero(~was_done):
            replay.add(obs[i], next_obs[i], actions[i], rewards[i], terminated[i])
        was_done = np.logical_or(terminated, truncated)
        obs = next_obs
        if step > learning_starts and step % hp["train_frequency"] == 0:
            b_obs, b_next, b_actions, b_rewards, b_dones = replay.sample(
                hp["batch_size"], rng, device)
            # TD target y = r + gamma max_a' Q_target(s', a') (1 - done); loss (y - Q(s, a))^2
            with torch.no_grad():
                target_max, _ = target(b_next).max(dim=1)
                td_target = b_rewards + hp["gamma"] * target_max * (1 - b_dones)
            old_val = q_net(b_obs).gather(1, b_actions.unsqueeze(1)).squeeze(1)
            loss = F.mse_loss(td_target, old_val)
            if step % 100 == 0:  # CleanRL's logging reads
                logged = dict(td_loss=loss.item(), q_values=old_val.mean().item())
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            updates += 1
        if step > learning_starts and step % hp["target_network_frequency"] == 0:
            tau = hp["tau"]
            for t_param, param in zip(target.parameters(), q_net.parameters()):
                t_param.data.copy_(tau * param.data + (1.0 - tau) * t_param.data)
        if observe((step + 1) * n_envs, updates):
            break
    return dict(n_envs=n_envs, last_logged=logged)


# ---- the script ------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--algo", choices=("dqn", "sac"), required=True)
    p.add_argument("--style", choices=("cleanrl", "leanrl"), default="cleanrl",
                   help="leanrl: SAC only")
    p.add_argument("--env", default=None, help="default: Pong (dqn), HalfCheetah-v5 (sac)")
    p.add_argument("--envs", type=int, default=1, help="DQN: environments (CleanRL: 1)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--warmup", type=float, default=3.0)
    p.add_argument("--settle", type=int, default=10,
                   help="gradient steps before the warm-up starts (compilation, capture)")
    p.add_argument("--learning-starts", type=int, default=None,
                   help="default 3000 (dqn), 5000 (sac)")
    p.add_argument("--buffer-size", type=int, default=None,
                   help="default 100000 (dqn, as scripts/bench/bench_async.py), 1000000 (sac)")
    p.add_argument("--compile", choices=("auto", "on", "off"), default="auto")
    p.add_argument("--threads", type=int, default=0,
                   help="torch threads (default 0: torch's own choice, as CleanRL leaves it)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    if args.style == "leanrl" and args.algo != "sac":
        p.error("--style leanrl is written for sac only")
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    window = Window(args.seconds, args.warmup, args.settle)
    t0 = time.time()
    if args.algo == "dqn":
        if args.env not in (None, "pong"):
            p.error("the DQN peer runs Pong only")
        envs = make_ale_vector_env(args.envs)
        try:
            extra = cleanrl_dqn(envs, device, window.observe, args.learning_starts or 3000,
                                args.buffer_size or 100_000, seed=args.seed)
        finally:
            envs.close()
        env_id = "pong"
    else:
        import gymnasium as gym

        env_id = args.env or "HalfCheetah-v5"
        env = gym.make(env_id)
        size, starts = args.buffer_size or 1_000_000, args.learning_starts or 5000
        try:
            if args.style == "cleanrl":
                replay = HostReplay(size, env.observation_space.shape, np.float32,
                                    env.action_space.shape, np.float32)
                extra = cleanrl_sac(env, device, window.observe, starts, replay, seed=args.seed)
            else:
                extra = leanrl_sac(env, device, window.observe, starts, size, seed=args.seed,
                                   compile_mode=args.compile)
        finally:
            env.close()
    result = dict(window.result(), algo=args.algo, style=args.style, env=env_id,
                  device=str(device), wall_s=time.time() - t0, **extra)
    print_result(result)
    if args.json:
        write_json(args.json, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
