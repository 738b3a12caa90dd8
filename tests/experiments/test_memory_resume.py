"""A recurrent run resumes exactly with every memory core: N iterations resumed for N more
equal 2N uninterrupted (serial sampler, row for row on progress.csv)."""
from __future__ import annotations

import pytest

from rlfast.cli import main
from rlfast.models.memory import CORES
from tests.experiments.test_resume import _assert_same_returns, _rows, _train

pytest.importorskip("popgym")

TASK = "popgym:PositionOnlyCartPoleEasy"  # plain-data state: its episodes continue
SETS = ["runner.log_interval_steps=128", "algo.linear_lr_schedule=False", "sampler.batch_B=4",
        "sampler.batch_T=16", "sampler.eval_n_envs=2", "sampler.eval_max_trajectories=2",
        "agent.core_size=16", "agent.memory_len=5", "agent.model_kwargs.hidden_sizes=[16]"]


@pytest.mark.parametrize("core", list(CORES))
def test_resume_with_each_core_equals_uninterrupted(tmp_path, core):
    full, half = tmp_path / "full", tmp_path / "half"
    sets = SETS + [f"agent.core={core}"]
    _train(full, "ppo", TASK, 512, sets)
    _train(half, "ppo", TASK, 256, sets)
    assert main(["resume", str(half), "--steps", "512", "--no-progress"]) == 0
    _assert_same_returns(full, half)
    assert len(_rows(half)) == len(_rows(full))
