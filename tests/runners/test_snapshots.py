"""Snapshots and resume as a component (``Snapshots``): what is handed to the logger, when an
interrupted run saves a final snapshot, what a resume needs; and the module stands below the
runners (it imports none of them)."""
from __future__ import annotations

import ast
import os

import pytest

import rlfast.runners
from rlfast.runners.snapshots import (RESUME_SEED_STRIDE, Snapshots, check_resumable,
                                      fresh_episode_seed)
from rlfast.utils.logging import logger_context

RUNNERS_DIR = os.path.dirname(rlfast.runners.__file__)


def _runners_imported_by(module: str) -> set[str]:
    """The rlfast.runners modules ``module`` imports, directly or through other runner
    modules (module-level and function-level imports, TYPE_CHECKING blocks too)."""
    seen, todo = set(), [module]
    while todo:
        name = todo.pop()
        path = os.path.join(RUNNERS_DIR, name + ".py")
        for node in ast.walk(ast.parse(open(path).read())):
            targets = []
            if isinstance(node, ast.ImportFrom) and node.module:
                if node.module == "rlfast.runners":  # the package: its __init__ and names
                    targets = ["__init__"] + [a.name for a in node.names]
                elif node.module.startswith("rlfast.runners."):
                    targets = [node.module.split(".")[2]]
            elif isinstance(node, ast.Import):
                targets = [a.name.split(".")[2] for a in node.names
                           if a.name.startswith("rlfast.runners.")]
            for target in targets:
                if os.path.isfile(os.path.join(RUNNERS_DIR, target + ".py")) and target not in seen:
                    seen.add(target)
                    todo.append(target)
    return seen


def test_snapshots_import_no_runner():
    assert not _runners_imported_by("snapshots") & {"minibatch_rl", "async_rl", "sync_rl",
                                                     "__init__"}


class _Runner:
    """What ``build_snapshot`` reads of a runner."""

    def __init__(self):
        import torch

        self.agent = torch.nn.Linear(1, 1)
        self.algo = type("Algo", (), dict(optim_state_dict=lambda s: {"state": {}},
                                          state_dict=lambda s: {"update_counter": 3}))()
        self.sampler = type("Sampler", (), dict(state_dict=lambda s: None))()
        self.itr_batch_size, self.n_steps, self.seed = 8, 80, 5
        self.snapshot_replay = False

    def runner_state(self):
        return {"cum_time": 1.0}


@pytest.mark.parametrize("mode, gap, itrs_done, saved_through, due", [
    ("last", 1, 6, 4, True),
    ("all", 1, 6, 4, True),
    ("last", 1, 4, 4, False),  # the last snapshot covers every finished iteration
    ("last", 1, 0, 0, False),  # nothing finished
    ("none", 1, 6, 4, False),  # the logger keeps nothing
    ("gap", 3, 7, 4, True),  # itr 6 is one the gap keeps
    ("gap", 3, 6, 4, False),
])
def test_final_snapshot_due(tmp_path, mode, gap, itrs_done, saved_through, due):
    snapshots = Snapshots()
    snapshots.covered_itrs = saved_through
    with logger_context(str(tmp_path), 0, "s", {}, override_prefix=True, snapshot_mode=mode,
                        snapshot_gap=gap):
        assert snapshots.final_due(itrs_done) is due
    assert snapshots.final_due(itrs_done) is False  # no snapshot directory outside a run


def test_save_hands_the_snapshot_over_and_records_its_iteration(tmp_path):
    from rlfast.utils.logging import load_snapshot

    snapshots = Snapshots()
    snapshots.resume_count = 2
    runner = _Runner()
    with logger_context(str(tmp_path), 0, "s", {}, override_prefix=True, snapshot_mode="last"):
        snapshots.save(runner, 4)
    assert snapshots.covered_itrs == 5
    snap = load_snapshot(tmp_path / "params.pkl")
    assert (snap["itr"], snap["cum_steps"], snap["resume_count"]) == (4, 40, 2)
    assert snap["runner_state"] == {"cum_time": 1.0}
    snapshots.save(runner, 6)  # no logger directory: nothing written, still recorded
    assert snapshots.covered_itrs == 7


def test_resume_from_counts_resumes_and_refuses_old_snapshots():
    snapshots = Snapshots()
    complete = dict(itr=3, agent_state_dict={}, optimizer_state_dict={}, algo_state={},
                    rng_state={}, runner_state={}, resume_count=1)
    snapshots.resume_from(complete, "/somewhere")
    assert snapshots.resume == (complete, "/somewhere")
    assert snapshots.resume_count == 2
    with pytest.raises(ValueError, match="lacks optimizer_state_dict"):
        Snapshots().resume_from(dict(itr=3, agent_state_dict={}))
    with pytest.raises(ValueError, match="cannot be resumed"):
        check_resumable({})


def test_fresh_episode_seed():
    assert fresh_episode_seed(7, 0) == 8
    assert fresh_episode_seed(7, 2) == 8 + 2 * RESUME_SEED_STRIDE
