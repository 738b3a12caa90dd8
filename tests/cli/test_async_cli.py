"""``rlfast train ... --runner async``: every replay-based preset, its samplers, its
affinity codes, and the refusals that say why."""
from __future__ import annotations

import csv
import json

import pytest
import torch

from rlfast.cli import main
from rlfast.experiments.assembly import affinity_for_run

ASYNC_CODE = "0slt_2cpu_0gpu_2cpr_0hto_1res_1ass"
# Short runs: a Pendulum preset makes one update per step once it learns, and those updates
# are the cost of its run.
_SHORT = ["--no-progress", "--set", "runner.log_interval_steps=300",
          "--set", "algo.min_steps_learn=150", "--set", "sampler.eval_max_steps=400",
          "--set", "sampler.eval_n_envs=2"]


def _rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.parametrize("algo,env,sampler", [
    ("dqn", "CartPole-v1", "serial"), ("cat_dqn", "CartPole-v1", "cpu"),
    ("rainbow", "CartPole-v1", "gpu"), ("r2d1", "CartPole-v1", "alternating"),
    ("ddpg", "Pendulum-v1", "serial"), ("td3", "Pendulum-v1", "cpu"),
    ("sac", "Pendulum-v1", "serial")])
def test_every_replay_preset_trains_asynchronously(tmp_path, capsys, algo, env, sampler):
    log_dir = tmp_path / algo
    code = main(["train", algo, env, "--runner", "async", "--sampler", sampler,
                 "--steps", "900", "--n-envs", "2", "--log-dir", str(log_dir)] + _SHORT)
    assert code == 0
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith("Final evaluation return")
    params = json.loads((log_dir / "params.json").read_text())
    assert params["runner"] == "async" and params["sampler"] == sampler
    rows = _rows(log_dir / "progress.csv")
    assert int(rows[-1]["Diagnostics/CumSteps"]) >= 900
    assert float(rows[-1]["Diagnostics/CumUpdates"]) > 0
    for column in ("ReplayRatio", "SamplerItrPerSecond", "UpdatesPerSecond", "PolicyLag"):
        assert f"Diagnostics/{column}" in rows[-1]


@pytest.mark.parametrize("algo", ["ppo", "a2c"])
def test_on_policy_algorithms_are_refused_with_the_reason(capsys, algo):
    assert main(["train", algo, "CartPole-v1", "--runner", "async"]) == 2
    err = capsys.readouterr().err
    assert "--runner async needs a replay-based algorithm" in err and "on-policy" in err


def test_async_takes_ass_codes_and_sync_refuses_them(tmp_path):
    affinity = affinity_for_run(ASYNC_CODE, "async")
    assert affinity["optimizer"][0]["master_cpus"] == [0]
    assert affinity["sampler"]["workers_cpus"] == [[1]]
    with pytest.raises(ValueError, match="--runner async"):
        affinity_for_run(ASYNC_CODE)  # a synchronous run
    with pytest.raises(ValueError, match="1ass"):
        affinity_for_run("0slt_2cpu_0gpu_0hto", "async")
    log_dir = tmp_path / "pinned"
    assert main(["train", "dqn", "CartPole-v1", "--runner", "async", "--sampler", "cpu",
                 "--steps", "1200", "--affinity", ASYNC_CODE, "--log-dir", str(log_dir)]
                + _SHORT) == 0
    assert json.loads((log_dir / "params.json").read_text())["affinity"] == ASYNC_CODE


def test_two_optimizer_gpus_decode_to_two_ranks_and_are_checked_against_the_machine(capsys):
    """An async code with gpr 2 asks for two optimizer ranks (one per GPU); this CPU-only
    machine has no such GPUs, which is a configuration error naming them."""
    from rlfast.launching import affinity_from_code
    decoded = affinity_from_code("0slt_4cpu_2gpu_2gpr_0hto_1res_1ass")
    assert [o["cuda_idx"] for o in decoded["optimizer"]] == [0, 1]
    if torch.cuda.device_count() >= 2:
        pytest.skip("this machine has the two GPUs")
    code = main(["train", "dqn", "CartPole-v1", "--runner", "async", "--affinity",
                 "0slt_4cpu_2gpu_2gpr_0hto_1res_1ass"])
    assert code == 2
    assert "cuda:0 (cuda_idx) does not exist" in capsys.readouterr().err
