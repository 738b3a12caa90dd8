"""``--wandb`` in a multi-rank run (torchrun, two ranks on gloo): rank 0 alone makes a W&B run
(offline mode, no network), and that run holds one history row per progress.csv row."""
import glob
import os
import time

import pytest

from tests.integration import _sync_helpers as h

pytest.importorskip("wandb")

from tests.experiments.test_wandb import _history  # noqa: E402

RUN_LIMIT_S = 240


def test_only_rank_zero_tracks_a_two_rank_run(tmp_path):
    log_dir, out = tmp_path / "run", tmp_path / "output.txt"
    cmd = h.torchrun(tmp_path) + [
        "--standalone", "--nproc-per-node", "2", "-m", "rlfast", "train", "ppo", "CartPole-v1",
        "--sampler", "serial", "--steps", "4096", "--log-dir", str(log_dir), "--no-progress",
        "--set", "runner.log_interval_steps=2048", "--wandb", "ranks"]
    env = h.child_env(WANDB_MODE="offline", WANDB_SILENT="true",
                      WANDB_CONFIG_DIR=str(tmp_path / "wandb_home"),
                      WANDB_CACHE_DIR=str(tmp_path / "wandb_home"),
                      WANDB_DATA_DIR=str(tmp_path / "wandb_home"))
    proc = h.start(cmd, tmp_path, out, env)
    try:
        gone = h.wait_all_gone([proc], str(log_dir), time.monotonic() + RUN_LIMIT_S)
        output = h.read_text(out)
        assert gone is not None and proc.returncode == 0, output[-3000:]
    finally:
        h.kill_all([proc], str(log_dir))
    runs = glob.glob(os.path.join(str(tmp_path), "**", "run-*.wandb"), recursive=True)
    runs = [r for r in runs if "latest-run" not in r]
    assert len(runs) == 1, runs  # one W&B run, in the run directory, from rank 0
    assert runs[0].startswith(str(log_dir))
    _, rows, config = _history(runs[0])
    progress = h.read_progress(os.path.join(str(log_dir), "progress.csv"))
    assert len(rows) == len(progress) >= 2
    assert config["world_size"] == 2
