"""How ``python -m pytest -n 2`` (pytest-xdist) runs the suite on two workers side by side.

Every module is a scheduling scope of its own: it runs whole on one worker, its module
fixtures built once. Three kinds of module share the two workers:

- ``IN_PROCESS_MODULES`` start no process (no fork, ``multiprocessing`` process or
  subprocess) and make no shared memory; ``SERIAL_RUN_MODULES`` start only
  ``rlfast train ... --sampler serial`` runs (one process each, no worker, no shared memory).
  The guard (:func:`forbid_processes`, an autouse fixture in conftest.py) keeps both lists
  true: a listed module's test that starts anything else fails, naming its list.
- Process modules (all the others) start real processes over real shared memory. Two of
  them may run at once, one on each worker: each checks only what it owns, the descendants
  of its own worker process (or the sessions and command lines of its runs) and the
  ``/dev/shm`` entries that no other worker's process holds (tests/_leaks.py).
- ``EXCLUSIVE_MODULES`` are process modules that measure CPU load or wall time against a
  bound. They form one scope, and each of its modules runs while no other process module
  does (:func:`process_turn`: an exclusive lock, where the others take a shared one). The
  other worker keeps running in-process modules meanwhile, as it always did.

The scheduler (:func:`make_scheduler`, conftest.py's ``pytest_xdist_make_scheduler``, used
whatever ``--dist`` says) hands out the exclusive scope first, then the in-process modules,
which the other worker runs while it lasts, then the process modules; within each kind the
learning checks first, then the modules with the most tests, so that the run ends on short
ones. Without ``-n`` nothing changes but the guard, which runs
either way, and no lock is taken.

The lists were drawn up by recording, for every test of the suite, whether it started a
process or made shared memory (the first two), and which tests assert on CPU load or a
time bound (the third).
"""
from __future__ import annotations

import contextlib
import fcntl
import multiprocessing.process
import multiprocessing.shared_memory
import os
import subprocess
import tempfile
from collections.abc import Iterator

import pytest
import torch

IN_PROCESS_MODULES = frozenset({
    "tests/docs/test_generated_settings.py",
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
    "tests/experiments/test_class_defaults.py",
    "tests/experiments/test_config.py",
    "tests/experiments/test_config_file.py",
    "tests/launching/test_package.py",
    "tests/experiments/test_registry.py",
    "tests/experiments/test_plot.py",
    "tests/learning/test_a2c_cartpole.py",
    "tests/learning/test_cat_dqn_cartpole.py",
    "tests/learning/test_rainbow_cartpole.py",
    "tests/learning/test_dqn_acrobot.py",
    "tests/learning/test_dqn_cartpole.py",
    "tests/learning/test_dqn_spread.py",
    "tests/learning/test_masked_envs.py",
    "tests/learning/test_multidiscrete_ppo.py",
    "tests/learning/test_mappo_spread.py",
    "tests/learning/test_gru_popgym.py",
    "tests/learning/test_ppo_pendulum_normalization.py",
    "tests/learning/test_qpg_pendulum.py",
    "tests/learning/test_r2d1_masked_cartpole.py",
    "tests/learning/test_recurrent_ppo.py",
    "tests/learning/test_recurrent_mappo_masked_spread.py",
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
    "tests/utils/test_affinity.py",
    "tests/utils/test_random_variants.py",
    "tests/utils/test_variant.py",
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

# Process modules that assert on CPU load or on a time bound (see the module docstring).
EXCLUSIVE_MODULES = frozenset({
    "tests/runners/test_async_rl.py",  # the optimizer's idle share under the replay throttle
    "tests/integration/test_faults.py",  # every process gone within 30 s of the fault
    "tests/integration/test_async_faults.py",  # likewise
    "tests/integration/test_sync_launch.py",  # likewise, for ranks
})
EXCLUSIVE_GROUP = "exclusive"


def module_path(item: pytest.Item) -> str:
    """``tests/...py`` of ``item``, relative to the repository root."""
    return item.nodeid.split("::", 1)[0]


def is_process_module(path: str) -> bool:
    """Whether the tests of module ``path`` may start processes and share memory."""
    return path not in IN_PROCESS_MODULES and path not in SERIAL_RUN_MODULES


def scope_of(nodeid: str) -> str:
    """The scheduling scope of a test: its module, or ``EXCLUSIVE_GROUP`` for the modules
    of ``EXCLUSIVE_MODULES``, which run one after the other on one worker."""
    path = nodeid.split("::", 1)[0]
    return EXCLUSIVE_GROUP if path in EXCLUSIVE_MODULES else path


def _scope_order(scope: str, n_tests: int) -> tuple:
    """Where a scope goes in the work queue (see the module docstring): within each kind,
    the learning checks first (few tests, each a run of tens of seconds), then the modules
    with the most tests."""
    if scope == EXCLUSIVE_GROUP:
        return (0, 0, 0)
    kind = 2 if is_process_module(scope) else 1
    return (kind, 0 if scope.startswith("tests/learning/") else 1, -n_tests)


def make_scheduler(config: pytest.Config, log):
    """pytest-xdist's scope scheduler with :func:`scope_of` as its scopes (a scope runs whole
    on one worker, one test after the other) and the queue in :func:`_scope_order`."""
    from xdist.scheduler import LoadScopeScheduling

    class ProcessesApartScheduling(LoadScopeScheduling):
        _ordered = False

        def _split_scope(self, nodeid: str) -> str:
            return scope_of(nodeid)

        def _assign_work_unit(self, node) -> None:
            if not self._ordered:  # the first assignment: the queue is whole
                ordered = sorted(self.workqueue.items(),
                                 key=lambda scope_tests: _scope_order(scope_tests[0],
                                                                     len(scope_tests[1])))
                self.workqueue.clear()
                self.workqueue.update(ordered)
                self._ordered = True
            super()._assign_work_unit(node)

    return ProcessesApartScheduling(config, log)


def _lock_paths(config: pytest.Config) -> tuple[str, str] | None:
    """The two lock files that this run's workers share, or None outside pytest-xdist. They
    lie in the run's base temporary folder (each worker's is a folder of it), which pytest
    removes with its old runs; the run's ``testrunuid`` names them."""
    workerinput = getattr(config, "workerinput", None)
    if workerinput is None:
        return None
    base = config.option.basetemp
    folder = os.path.dirname(os.path.abspath(base)) if base else tempfile.gettempdir()
    stem = os.path.join(folder, f"rlfast-tests-{workerinput['testrunuid']}")
    return stem + ".gate", stem + ".turn"


@contextlib.contextmanager
def process_turn(config: pytest.Config, path: str) -> Iterator[None]:
    """Hold the run's turn for module ``path`` while it runs: shared for a process module,
    exclusive for one of ``EXCLUSIVE_MODULES``, none for the in-process ones or without
    xdist. A gate taken before the turn lets a waiting exclusive module in ahead of shared
    ones that come later, so that it cannot wait for ever."""
    paths = _lock_paths(config)
    if paths is None or not is_process_module(path):
        yield
        return
    kind = fcntl.LOCK_EX if path in EXCLUSIVE_MODULES else fcntl.LOCK_SH
    gate = os.open(paths[0], os.O_RDWR | os.O_CREAT, 0o600)
    turn = os.open(paths[1], os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(gate, fcntl.LOCK_EX)
        try:
            fcntl.flock(turn, kind)
        finally:
            fcntl.flock(gate, fcntl.LOCK_UN)
        yield
    finally:
        os.close(turn)  # closing the last descriptor releases the lock
        os.close(gate)


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
