"""An affinity code's slot keeps the preset's choice of master torch threads (issue 52: the
2-core code gave a 64-wide SAC learner two pinned threads, which crawled beside any other busy
process)."""
from __future__ import annotations

import argparse

from rlfast.experiments.assembly import affinity_for_run
from rlfast.experiments.placement import run_affinity, threads_in_slot

CODE = "0slt_2cpu_0gpu_2cpr_0hto"


def test_a_preset_of_one_thread_keeps_one_inside_a_two_core_slot():
    slot = affinity_for_run(CODE)
    assert slot["master_torch_threads"] == 2 and slot["master_cpus"] == [0, 1]
    fitted = threads_in_slot(slot, {"affinity": {"master_torch_threads": 1}})
    assert fitted["master_torch_threads"] == 1
    assert {k: v for k, v in fitted.items() if k != "master_torch_threads"} == \
        {k: v for k, v in slot.items() if k != "master_torch_threads"}
    assert slot["master_torch_threads"] == 2  # the decoded code is not changed in place


def test_every_core_and_caps_and_no_key():
    slot = affinity_for_run(CODE)
    for asked in (0, 8):
        preset = {"affinity": {"master_torch_threads": asked}}
        assert threads_in_slot(slot, preset)["master_torch_threads"] == 2
    # No key: the master decides by its model, as without a code (MasterAffinity).
    assert threads_in_slot(slot, {})["master_torch_threads"] is None
    on_gpu = dict(slot, cuda_idx=0)
    assert threads_in_slot(on_gpu, {}) is on_gpu
    ranks = [dict(slot), dict(slot)]
    assert [a["master_torch_threads"] for a in
            threads_in_slot(ranks, {"affinity": {"master_torch_threads": 1}})] == [1, 1]
    async_affinity = {"optimizer": [dict(slot)], "sampler": dict(slot)}
    preset = {"affinity": {"master_torch_threads": 1}}
    assert threads_in_slot(async_affinity, preset) is async_affinity


def test_sac_on_pendulum_with_the_code_trains_on_one_thread():
    from rlfast.experiments.assembly import train_config
    config = train_config(argparse.Namespace(
        algo="sac", env="Pendulum-v1", steps=None, n_envs=None, seed=0, config=None, set=None,
        sampler=None, runner="sync", world_size=None, affinity=CODE, device="cpu"))
    affinity = run_affinity(config, "serial", affinity=affinity_for_run(CODE), device="cpu",
                            code=CODE)
    assert affinity["master_torch_threads"] == 1


def test_without_the_key_an_mlp_optimizes_on_one_thread_and_a_cnn_on_the_slot():
    import torch

    from rlfast.agents import AtariFfAgent, DqnAgent
    from rlfast.runners.master_affinity import MasterAffinity
    from tests.agents._spaces import spaces_of
    slot = threads_in_slot(affinity_for_run(CODE), {})
    before = torch.get_num_threads()
    for agent, env_id, expected in ((DqnAgent(model_kwargs=dict(hidden_sizes=[8])),
                                     "cartpole", 1),
                                    (AtariFfAgent(), "pong", 2)):
        agent.initialize(spaces_of(env_id))
        master = MasterAffinity(dict(slot, set_affinity=False))
        master.pin()
        try:
            master.choose_optimize_threads(agent)
            assert master.optimize_threads == expected, env_id
        finally:
            master.restore()
    assert torch.get_num_threads() == before
