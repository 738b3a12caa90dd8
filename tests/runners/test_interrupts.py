"""Runners on SIGTERM and Ctrl-C: log it, save a final snapshot when one is due, stop the
sampler, re-raise; the SIGTERM handler lives only as long as ``train``."""
import os
import pickle
import signal
import threading

import pytest
import torch

from rlfast.agents import CategoricalPgAgent
from rlfast.algos import PPO
from rlfast.envs import make
from rlfast.runners import MinibatchRl, MinibatchRlEval, TrainingInterrupted
from rlfast.runners import minibatch_rl
from rlfast.samplers import SerialSampler
from rlfast.utils.logging import load_snapshot, logger_context

BATCH = 32  # batch_T 8 x batch_B 4
LOG_EVERY = 4  # iterations per log row (and regular snapshot)


class _HookedPPO(PPO):
    """PPO that calls ``hook(itr)`` before optimizing each iteration."""

    def __init__(self, hook, **kwargs):
        super().__init__(learning_rate=1e-3, minibatches=1, epochs=1, **kwargs)
        self.hook = hook

    def optimize_agent(self, itr, samples=None, sampler_itr=None):
        self.hook(itr)
        return super().optimize_agent(itr, samples)


def _sigterm_at(target_itr):
    def hook(itr):
        if itr == target_itr:
            os.kill(os.getpid(), signal.SIGTERM)  # the handler raises before this returns

    return hook


def _ctrl_c_at(target_itr):
    def hook(itr):
        if itr == target_itr:
            raise KeyboardInterrupt

    return hook


def _runner(hook, RunnerCls=MinibatchRlEval, n_steps=100 * BATCH):
    sampler = SerialSampler(EnvCls=make, env_kwargs=dict(id="CartPole-v1"), batch_T=8,
                            batch_B=4, max_decorrelation_steps=5, eval_n_envs=1,
                            eval_max_steps=50, eval_max_trajectories=1)
    runner = RunnerCls(algo=_HookedPPO(hook), agent=CategoricalPgAgent(
        model_kwargs=dict(hidden_sizes=[8])), sampler=sampler, n_steps=n_steps, seed=1,
        log_interval_steps=LOG_EVERY * BATCH, progress_bar=False)
    shutdowns = []
    original = sampler.shutdown
    sampler.shutdown = lambda: (shutdowns.append(True), original())
    return runner, shutdowns


def _train(runner, exp_dir, snapshot_mode="last"):
    with logger_context(str(exp_dir), 0, "interrupts", {}, override_prefix=True,
                        snapshot_mode=snapshot_mode):
        return runner.train()


def _snapshot(exp_dir):
    return load_snapshot(exp_dir / "params.pkl")


def test_sigterm_saves_final_snapshot_logs_and_reraises(tmp_path):
    before = signal.getsignal(signal.SIGTERM)
    runner, shutdowns = _runner(_sigterm_at(6))  # regular snapshots after itrs 3 and 7
    with pytest.raises(TrainingInterrupted) as caught:
        _train(runner, tmp_path)
    assert caught.value.signum == signal.SIGTERM
    assert isinstance(caught.value, KeyboardInterrupt)
    assert shutdowns == [True]
    assert signal.getsignal(signal.SIGTERM) is before
    log = (tmp_path / "debug.log").read_text()
    assert f"Training interrupted by SIGTERM after 6 iterations ({6 * BATCH} steps)" in log
    assert "Training complete." not in log
    snap = _snapshot(tmp_path)  # itrs 0-5 finished; the last regular snapshot was itr 3
    assert snap["itr"] == 5 and snap["cum_steps"] == 6 * BATCH
    for key, value in runner.agent.state_dict().items():
        assert torch.equal(value, snap["agent_state_dict"][key])
    error = pickle.loads(pickle.dumps(caught.value))
    assert isinstance(error, TrainingInterrupted) and error.signum == signal.SIGTERM


def test_ctrl_c_saves_final_snapshot_and_reraises(tmp_path):
    runner, shutdowns = _runner(_ctrl_c_at(5), RunnerCls=MinibatchRl)
    with pytest.raises(KeyboardInterrupt) as caught:
        _train(runner, tmp_path)
    assert not isinstance(caught.value, TrainingInterrupted)
    assert shutdowns == [True]
    log = (tmp_path / "debug.log").read_text()
    assert f"Training interrupted by Ctrl-C (SIGINT) after 5 iterations ({5 * BATCH} steps)" in log
    assert _snapshot(tmp_path)["itr"] == 4


def test_no_final_snapshot_when_none_is_due(tmp_path):
    # Interrupted right after the regular snapshot of itr 3: nothing new to save.
    runner, _ = _runner(_sigterm_at(4))
    saved = []
    original = runner.save_itr_snapshot
    runner.save_itr_snapshot = lambda itr: (saved.append(itr), original(itr))
    with pytest.raises(TrainingInterrupted):
        _train(runner, tmp_path / "due")
    assert saved == [3]
    # Snapshot mode "none": the logger keeps nothing, so no final snapshot either.
    runner, shutdowns = _runner(_sigterm_at(2))
    with pytest.raises(TrainingInterrupted):
        _train(runner, tmp_path / "none", snapshot_mode="none")
    assert shutdowns == [True]
    assert not list((tmp_path / "none").glob("*.pkl"))
    # Interrupted in the first iteration: no iteration finished, nothing to save.
    runner, _ = _runner(_sigterm_at(0))
    with pytest.raises(TrainingInterrupted):
        _train(runner, tmp_path / "first")
    assert "after 0 iterations" in (tmp_path / "first" / "debug.log").read_text()
    assert not (tmp_path / "first" / "params.pkl").exists()


def test_gap_mode_final_snapshot_only_on_a_gap_iteration(tmp_path):
    for target, expected in ((7, ["itr_6.pkl"]), (6, [])):
        runner, _ = _runner(_sigterm_at(target))
        exp_dir = tmp_path / f"gap{target}"
        with logger_context(str(exp_dir), 0, "gap", {}, override_prefix=True,
                            snapshot_mode="gap", snapshot_gap=3):
            with pytest.raises(TrainingInterrupted):
                runner.train()
        # Regular snapshots at itrs 3 (selected by gap 3) and 7 (not reached).
        assert sorted(p.name for p in exp_dir.glob("*.pkl")) == sorted(["itr_3.pkl"] + expected)


def test_snapshot_error_during_interrupt_propagates_after_shutdown(tmp_path, monkeypatch):
    runner, shutdowns = _runner(_sigterm_at(2))

    def refuse(itr, params, sidecars=None):
        raise FloatingPointError("non-finite weights in snapshot")

    monkeypatch.setattr(minibatch_rl.logger, "save_itr_params", refuse)
    with pytest.raises(FloatingPointError, match="non-finite") as caught:
        _train(runner, tmp_path)
    assert isinstance(caught.value.__context__, TrainingInterrupted)
    assert shutdowns == [True]


def test_sigterm_during_final_shutdown_completes_it_then_raises(tmp_path):
    runner, _ = _runner(lambda itr: None, n_steps=2 * BATCH)
    stopped = []
    original = runner.sampler.shutdown

    def shutdown():
        os.kill(os.getpid(), signal.SIGTERM)  # deferred: the shutdown must finish
        original()
        stopped.append(True)

    runner.sampler.shutdown = shutdown
    with pytest.raises(TrainingInterrupted):
        _train(runner, tmp_path)
    assert stopped == [True]
    log = (tmp_path / "debug.log").read_text()
    assert "Training complete." in log and "SIGTERM received after training completed" in log


def test_handler_restored_after_success_and_not_installed_off_main_thread(tmp_path):
    def marker(signum, frame):
        pass

    previous = signal.signal(signal.SIGTERM, marker)
    try:
        runner, _ = _runner(lambda itr: None, n_steps=2 * BATCH)
        seen = []
        runner.algo.hook = lambda itr: seen.append(signal.getsignal(signal.SIGTERM))
        result = _train(runner, tmp_path / "main")
        assert result["cum_steps"] == 2 * BATCH
        assert seen and all(h is not marker for h in seen)  # replaced while training
        assert signal.getsignal(signal.SIGTERM) is marker  # and restored

        runner, _ = _runner(lambda itr: None, n_steps=2 * BATCH)
        outcome = []
        thread = threading.Thread(target=lambda: outcome.append(
            _train(runner, tmp_path / "thread")))
        thread.start()
        thread.join(timeout=120)
        assert outcome and outcome[0]["cum_steps"] == 2 * BATCH
        assert signal.getsignal(signal.SIGTERM) is marker
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_held_block_finishes_before_sigterm_or_ctrl_c_is_raised():
    """``SigtermGuard.held``: a signal during the block is raised only when it ends, and a
    Ctrl-C held there becomes a KeyboardInterrupt then."""
    import os
    import signal as _signal

    from rlfast.runners.interrupts import SigtermGuard, TrainingInterrupted

    previous = _signal.signal(_signal.SIGINT, _signal.default_int_handler)
    try:
        for signum, expected in ((_signal.SIGTERM, TrainingInterrupted),
                                 (_signal.SIGINT, KeyboardInterrupt)):
            finished = []
            with SigtermGuard() as guard:
                with pytest.raises(expected):
                    with guard.held():
                        os.kill(os.getpid(), signum)
                        for _ in range(1000):  # the handler has run by now
                            pass
                        finished.append(True)
            assert finished == [True]
        with SigtermGuard() as guard:  # nothing held: nothing raised
            with guard.held():
                pass
    finally:
        _signal.signal(_signal.SIGINT, previous)


# ---- TrainingGuard, the component every runner's train() runs under ------------------------------
class _GuardedRunner:
    """What ``TrainingGuard`` reads of a runner: a snapshot record and the hooks it calls."""

    def __init__(self, itrs_done=0, due=False):
        from rlfast.runners.snapshots import Snapshots

        self.itrs_done = itrs_done
        self.cadence = None
        self.diagnostics = "a previous run's"  # a new run starts without it
        self.snapshots = Snapshots()
        self.snapshots.final_due = lambda itrs: due
        self.calls = []

    def save_itr_snapshot(self, itr):
        self.calls.append(("save", itr, signal.getsignal(signal.SIGTERM)))

    def shutdown(self):
        self.calls.append(("shutdown",))


def test_guard_installs_the_sigterm_handler_for_the_body_only(tmp_path):
    from rlfast.runners.interrupts import TrainingGuard

    def marker(signum, frame):
        pass

    previous = signal.signal(signal.SIGTERM, marker)
    try:
        runner, guard, seen = _GuardedRunner(), TrainingGuard(), []
        with logger_context(str(tmp_path), 0, "guard", {}, override_prefix=True):
            with guard.guarding(runner):
                seen.append(signal.getsignal(signal.SIGTERM))
                seen.append((runner.itrs_done, runner.snapshots.covered_itrs,
                             runner.diagnostics))  # a run starts afresh
        assert seen[0] is not marker and seen[0] not in (signal.SIG_DFL, None)
        assert seen[1] == (0, 0, None)
        assert signal.getsignal(signal.SIGTERM) is marker
        assert runner.calls == [("shutdown",)]
        assert "Training complete." in (tmp_path / "debug.log").read_text()
    finally:
        signal.signal(signal.SIGTERM, previous)


@pytest.mark.parametrize("due", [True, False])
def test_guard_turns_sigterm_into_training_interrupted_and_saves_when_due(tmp_path, due):
    from rlfast.runners.interrupts import TrainingGuard

    before = signal.getsignal(signal.SIGTERM)
    runner, guard = _GuardedRunner(due=due), TrainingGuard()

    with logger_context(str(tmp_path), 0, "guard", {}, override_prefix=True):
        with pytest.raises(TrainingInterrupted) as caught:
            with guard.guarding(runner):
                runner.itrs_done = 3
                os.kill(os.getpid(), signal.SIGTERM)
                for _ in range(1000):  # the handler raises before this loop ends
                    pass
                raise AssertionError("SIGTERM did not interrupt the body")
    assert caught.value.signum == signal.SIGTERM
    kinds = [c[0] for c in runner.calls]
    assert kinds == (["save", "shutdown"] if due else ["shutdown"])
    if due:
        assert runner.calls[0][1] == 2  # the last finished iteration
    assert signal.getsignal(signal.SIGTERM) is before
    log = (tmp_path / "debug.log").read_text()
    assert "Training interrupted by SIGTERM after 3 iterations (0 steps)" in log
    assert "Training complete." not in log


def test_guard_shuts_down_on_an_error_and_holds_nothing_outside_a_run(tmp_path):
    from rlfast.runners.interrupts import TrainingGuard, describe_interrupt

    runner, guard = _GuardedRunner(due=True), TrainingGuard()
    with guard.held():  # outside guarding(): a plain block
        pass

    with logger_context(str(tmp_path), 0, "guard", {}, override_prefix=True):
        with pytest.raises(RuntimeError, match="planted"):
            with guard.guarding(runner):
                raise RuntimeError("planted")
    assert runner.calls == [("shutdown",)]  # an error is no interrupt: no final snapshot
    assert describe_interrupt(KeyboardInterrupt()) == "Ctrl-C (SIGINT)"
    assert describe_interrupt(TrainingInterrupted(signal.SIGTERM)) == "SIGTERM"
