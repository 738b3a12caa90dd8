"""Which test modules may run beside the others (``python -m pytest -n 2``, pytest-xdist).

Most of the suite starts real processes and checks afterwards that none is left and that no
new ``/dev/shm`` entry appeared, or measures CPU load: run side by side, two such tests would
see each other's processes and shared memory. So every test belongs to one scheduling scope,
``processes``, run one test after the other on one worker, except the modules listed in
``IN_PROCESS_MODULES``: they start no process (no fork, ``multiprocessing`` process or
subprocess) and make no shared memory, and each is a scope of its own (its module fixtures
built once) that the other worker runs meanwhile. So do the modules in
``SERIAL_RUN_MODULES``, whose only processes are ``rlfast train ... --sampler serial`` runs:
one process each, no worker, no shared memory.

The list was drawn up by recording, for every test of the suite, whether it did either; the
guard (:func:`forbid_processes`, an autouse fixture in conftest.py) keeps it true: a listed
module's test that starts a process or makes shared memory fails, naming this list. The
scopes are given to pytest-xdist by a scheduler of its own kind (:func:`make_scheduler`,
conftest.py's ``pytest_xdist_make_scheduler``), whatever ``--dist`` says. Without ``-n``
nothing changes but the guard, which runs either way.
"""
from __future__ import annotations

import multiprocessing.process
import multiprocessing.shared_memory
import os
import subprocess

import pytest
import torch

PROCESSES_GROUP = "processes"
IN_PROCESS_MODULES = frozenset({
    "tests/algos/test_host_syncs.py",
    "tests/algos/test_replay_host_syncs.py",
    "tests/algos/test_graph_step.py",
    "tests/algos/test_replay_choice.py",
    "tests/scripts/test_bench_gpu_plan.py",
    "tests/utils/test_host_sync.py",
    "tests/utils/test_pinned.py",
    "tests/agents/test_action_check.py",
    "tests/agents/test_autocast.py",
    "tests/agents/test_dqn_agents.py",
    "tests/agents/test_multi_categorical_agents.py",
    "tests/agents/test_qpg_agents.py",
    "tests/agents/test_sac_gsde.py",
    "tests/algos/test_a2c.py",
    "tests/algos/test_base.py",
    "tests/algos/test_dqn.py",
    "tests/algos/test_nonfinite.py",
    "tests/algos/test_ppo.py",
    "tests/algos/test_qpg.py",
    "tests/algos/test_r2d1.py",
    "tests/algos/test_r2d1_cores.py",
    "tests/algos/test_reward_norm.py",
    "tests/algos/test_utils.py",
    "tests/distributions/test_categorical.py",
    "tests/distributions/test_epsilon_greedy.py",
    "tests/distributions/test_gaussian.py",
    "tests/distributions/test_multi_categorical.py",
    "tests/envs/test_atari.py",
    "tests/envs/test_env_base.py",
    "tests/envs/test_pettingzoo.py",
    "tests/envs/test_popgym.py",
    "tests/envs/test_env_state.py",
    "tests/envs/test_final_observation.py",
    "tests/envs/test_gym.py",
    "tests/envs/test_info_consistency.py",
    "tests/es/test_policy.py",
    "tests/es/test_strategies.py",
    "tests/experiments/test_config.py",
    "tests/experiments/test_config_file.py",
    "tests/experiments/test_registry.py",
    "tests/experiments/test_plot.py",
    "tests/learning/test_a2c_cartpole.py",
    "tests/learning/test_cat_dqn_cartpole.py",
    "tests/learning/test_dqn_acrobot.py",
    "tests/learning/test_dqn_cartpole.py",
    "tests/learning/test_masked_envs.py",
    "tests/learning/test_multidiscrete_ppo.py",
    "tests/learning/test_mappo_spread.py",
    "tests/learning/test_gru_popgym.py",
    "tests/learning/test_ppo_pendulum_normalization.py",
    "tests/learning/test_qpg_pendulum.py",
    "tests/learning/test_r2d1_masked_cartpole.py",
    "tests/learning/test_recurrent_ppo.py",
    "tests/learning/test_sac_mujoco.py",
    "tests/models/test_atari_models.py",
    "tests/models/test_channels_last.py",
    "tests/models/test_dqn_models.py",
    "tests/models/test_memory.py",
    "tests/models/test_mlp_conv.py",
    "tests/models/test_pg_models.py",
    "tests/models/test_qpg_models.py",
    "tests/replays/test_device_replay.py",
    "tests/replays/test_device_sequence.py",
    "tests/replays/test_device_storage.py",
    "tests/replays/test_device_time_limit.py",
    "tests/replays/test_device_tree.py",
    "tests/replays/test_factory.py",
    "tests/replays/test_non_sequence.py",
    "tests/replays/test_package.py",
    "tests/replays/test_sequence.py",
    "tests/replays/test_state.py",
    "tests/replays/test_sum_tree.py",
    "tests/replays/test_time_limit.py",
    "tests/runners/test_cadence.py",
    "tests/runners/test_diagnostics.py",
    "tests/runners/test_interrupts.py",
    "tests/runners/test_master_affinity.py",
    "tests/runners/test_minibatch_rl.py",
    "tests/runners/test_optimizer_ranks.py",
    "tests/runners/test_rank_group.py",
    "tests/runners/test_replay_pace.py",
    "tests/runners/test_snapshots.py",
    "tests/runners/test_tracking.py",
    "tests/samplers/test_collectors.py",
    "tests/samplers/test_serial_sampler.py",
    "tests/spaces/test_box.py",
    "tests/spaces/test_composite.py",
    "tests/spaces/test_float_box.py",
    "tests/spaces/test_gym_wrapper.py",
    "tests/spaces/test_int_box.py",
    "tests/test_api_surface.py",
    "tests/test_class_hierarchy.py",
    "tests/test_layers.py",
    "tests/test_public_docs.py",
    "tests/utils/launching/test_affinity.py",
    "tests/utils/launching/test_random_variants.py",
    "tests/utils/launching/test_variant.py",
    "tests/utils/test_array.py",
    "tests/utils/test_buffer_copy.py",
    "tests/utils/test_logging.py",
    "tests/utils/test_logging_resume.py",
    "tests/experiments/test_memory_resume.py",
    "tests/experiments/test_export.py",
    "tests/utils/test_misc.py",
    "tests/utils/test_prog_bar.py",
    "tests/utils/test_rng_state.py",
    "tests/utils/test_seed.py",
    "tests/utils/test_shared_helpers.py",
    "tests/utils/test_snapshot.py",
    "tests/utils/test_tensor.py",
})


SERIAL_RUN_MODULES = frozenset({
    "tests/regression/test_behaviour_unchanged.py",
})


def module_path(item: pytest.Item) -> str:
    """``tests/...py`` of ``item``, relative to the repository root."""
    return item.nodeid.split("::", 1)[0]


def scope_of(nodeid: str) -> str:
    """The scheduling scope of a test: its module where that runs beside the others, else
    ``processes``."""
    path = nodeid.split("::", 1)[0]
    beside = path in IN_PROCESS_MODULES or path in SERIAL_RUN_MODULES
    return path if beside else PROCESSES_GROUP


def make_scheduler(config: pytest.Config, log):
    """pytest-xdist's scope scheduler with :func:`scope_of` as its scopes: a scope runs
    whole on one worker, one test after the other."""
    from xdist.scheduler import LoadScopeScheduling

    class ProcessesApartScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return scope_of(nodeid)

    return ProcessesApartScheduling(config, log)


def _is_serial_run(args: tuple, kwargs: dict) -> bool:
    argv = list(kwargs.get("args", args[0] if args else ()))
    return any(a == "train" for a in argv) and any(
        a == "--sampler" and b == "serial" for a, b in zip(argv, argv[1:]))


def forbid_processes(monkeypatch: pytest.MonkeyPatch, path: str,
                     serial_runs: bool = False) -> None:
    """Make starting a process or sharing memory fail in a test of ``path`` (a listed
    module), with a message that names the list; ``serial_runs``: except a subprocess
    ``... train ... --sampler serial``."""
    listing = "SERIAL_RUN_MODULES" if serial_runs else "IN_PROCESS_MODULES"

    def refuse(what: str, allowed=None, original=None):
        def refused(*args, **kwargs):
            if allowed is not None and allowed(args[1:], kwargs):
                return original(*args, **kwargs)
            raise AssertionError(
                f"{path} is listed in tests/_parallel.py's {listing} (it runs beside the "
                f"process tests under -n 2), but this test {what}: remove the module from "
                f"the list")
        return refused

    popen = refuse("starts a subprocess", _is_serial_run if serial_runs else None,
                   subprocess.Popen.__init__)
    monkeypatch.setattr(subprocess.Popen, "__init__", popen)
    monkeypatch.setattr(multiprocessing.process.BaseProcess, "start",
                        refuse("starts a multiprocessing process"))
    monkeypatch.setattr(os, "fork", refuse("forks"))
    monkeypatch.setattr(multiprocessing.shared_memory.SharedMemory, "__init__",
                        refuse("makes shared memory"))
    monkeypatch.setattr(torch.Tensor, "share_memory_", refuse("moves a tensor to shared memory"))
    monkeypatch.setattr(torch.UntypedStorage, "share_memory_",
                        refuse("moves a storage to shared memory"))
