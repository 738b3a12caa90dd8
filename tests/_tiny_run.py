"""A finished run directory of a few seconds (PPO on CartPole, serial sampler, 256 steps) for
tests of the commands that reopen a run: eval, export, snapshot loading."""
from __future__ import annotations

from pathlib import Path

from rlfast.cli import main


def train_tiny_run(run_dir: Path) -> Path:
    """Train the tiny run into ``run_dir`` (overwritten) and return it."""
    assert main(["train", "ppo", "CartPole-v1", "--steps", "256", "--sampler", "serial",
                 "--n-envs", "2", "--log-dir", str(run_dir), "--overwrite", "--no-progress",
                 "--set", "sampler.batch_T=64", "--set", "runner.log_interval_steps=128",
                 "--set", "sampler.eval_max_steps=200"]) == 0
    return run_dir
