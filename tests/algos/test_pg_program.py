"""PPO's and A2C's compiled step program (``compile=True``, a
:class:`~rlfast.algos.graph_step.GraphStep` over the minibatch indices): the same updates as the
plain learner.

The CUDA graph itself needs a GPU; what is checked here is everything around it, on the CPU:
the data flow through the program's static buffers (batch, minibatch index, diagnostics row,
the sticky failure flag feeding the fused optimizer's ``found_inf``) gives bit-for-bit the
plain learner's weights and diagnostics, the warm-up and capture runs never move a weight, a
capture that fails falls back to the eager body and says why, and ``torch.compile`` of the
loss trains alike within rounding, with no more host reads.
"""
from __future__ import annotations

import logging
import shutil

import pytest
import torch

from rlfast.algos import A2C, PPO
from rlfast.algos import graph_step
from rlfast.utils.finite import NonFiniteError
from rlfast.utils.host_sync import HostSyncCounter

from tests.algos import _pg_batch


def _run(capture=None, compile=False, itrs=2, T=7, B=3, minibatches=4, epochs=2, poison=None):
    """PPO on a synthetic batch (T*B = 21 items in minibatches of 5: four full ones and a
    remainder of one, which takes the eager path). Returns (algo, agent, infos)."""
    algo = PPO(minibatches=minibatches, epochs=epochs, compile=compile)
    algo.program_capture = capture
    agent, samples = _pg_batch.setup(algo, "categorical", T=T, B=B)
    if poison is not None:
        poison(agent)
    torch.manual_seed(11)
    infos = [algo.optimize_agent(itr, samples) for itr in range(itrs)]
    return algo, agent, infos


def _weights(agent):
    return {k: v.clone() for k, v in agent.state_dict().items()}


def test_the_program_gives_the_plain_learners_updates_bit_for_bit():
    _, plain_agent, plain = _run()
    algo, agent, program = _run(capture=graph_step.eager_program)
    assert algo._program is not None and algo._program.path == "eager"
    assert program == plain  # every diagnostic of every step, and the explained variance
    for name, tensor in _weights(agent).items():
        assert torch.equal(tensor, _weights(plain_agent)[name]), name
    assert algo.update_counter == 2 * 2 * 5


def _replaying_capture(calls):
    """A stand-in for capture_cuda_graph: runs the body for warm-up and 'capture' as the
    real one does, then replays by running it."""
    def capture(body):
        for _ in range(graph_step.WARMUP_STEPS + 1):
            body()
        calls.append("captured")
        return body
    return capture


def test_warm_up_and_capture_never_move_a_weight():
    calls = []
    algo = PPO(minibatches=4, epochs=1)
    algo.program_capture = _replaying_capture(calls)
    agent, samples = _pg_batch.setup(algo, "categorical")
    before = _weights(agent)
    program = algo._program_for(algo.loss_batch(samples, flatten=True), 5)
    assert calls == ["captured"] and program.path == "cuda-graph"
    for name, tensor in _weights(agent).items():
        assert torch.equal(tensor, before[name]), f"{name} moved during warm-up"
    # the learning rate became a device tensor the schedule fills in place
    assert all(isinstance(group["lr"], torch.Tensor) for group in algo.optimizer.param_groups)
    algo.optimizer.param_groups[0]["lr"] = 0.5  # a scheduler that assigns a float
    program.begin()
    rate = program.rates.rates[0]
    assert rate.item() == 0.5 and algo.optimizer.param_groups[0]["lr"] is rate


@pytest.mark.parametrize("kind", ["categorical", "gaussian"])
def test_a2c_through_the_program_gives_the_plain_updates_bit_for_bit(kind):
    def run(capture):
        algo = A2C()
        algo.program_capture = capture
        agent, samples = _pg_batch.setup(algo, kind, T=7, B=3)
        infos = [algo.optimize_agent(itr, samples) for itr in range(3)]
        return algo, agent, infos

    _, plain_agent, plain = run(None)
    algo, agent, programmed = run(graph_step.eager_program)
    assert algo._program is not None and algo._program.path == "eager"
    assert programmed == plain
    for name, tensor in _weights(agent).items():
        assert torch.equal(tensor, _weights(plain_agent)[name]), name


def test_a_capture_that_fails_falls_back_to_the_eager_body(caplog):
    def failing(body):
        raise RuntimeError("operation not permitted when stream is capturing")

    _, plain_agent, plain = _run()
    with caplog.at_level(logging.WARNING, logger=graph_step.__name__):
        algo, agent, infos = _run(capture=failing)
    assert algo._program.path.startswith("eager (fallback: RuntimeError: operation not")
    assert "could not be captured" in caplog.text
    assert infos == plain
    assert all(not isinstance(g["lr"], torch.Tensor) and not g["capturable"]
               for g in algo.optimizer.param_groups)
    for name, tensor in _weights(agent).items():
        assert torch.equal(tensor, _weights(plain_agent)[name]), name


def test_a_nonfinite_step_inside_the_program_stops_every_later_step():
    """The second backward pass gives a NaN gradient: the program's failure flag refuses it
    and every later step; the call raises naming it, and the weights are one step's."""
    from tests.algos.test_nonfinite import _nan_grad_from_call

    _, one_step_agent, _ = _run(capture=graph_step.eager_program, itrs=1, epochs=1,
                                minibatches=1)
    algo = PPO(minibatches=1, epochs=3)
    algo.program_capture = graph_step.eager_program
    agent, samples = _pg_batch.setup(algo, "categorical")
    _nan_grad_from_call(agent.model, first_bad=2)
    torch.manual_seed(11)
    with pytest.raises(NonFiniteError, match=r"^PPO: gradNorm is nan at iteration 0;"):
        algo.optimize_agent(0, samples)
    assert algo._program is not None and algo.update_counter == 1
    for name, tensor in _weights(agent).items():
        assert torch.equal(tensor, _weights(one_step_agent)[name]), name


def test_the_program_reads_the_host_once_per_call():
    algo, agent, _ = _run(capture=graph_step.eager_program, itrs=1)
    samples = _pg_batch.make_samples(agent, "categorical", 7, 3)
    with HostSyncCounter() as syncs:
        algo.optimize_agent(5, samples)
    assert syncs.count <= 2, syncs.report()


@pytest.mark.skipif(not (shutil.which("c++") or shutil.which("g++")),
                    reason="torch.compile's CPU backend (inductor) needs a C++ compiler")
def test_compiled_loss_trains_alike():
    """``torch.compile`` of the loss (inductor on the CPU) rounds differently, not more.
    (Host reads are not counted here: a TorchFunctionMode around compiled code makes Dynamo
    recompile under the mode, which torch 2.13 fails to guard.) A batch of 24, four
    minibatches of 6 and no remainder: a remainder minibatch would make Dynamo compile the
    loss a second time, for dynamic shapes, which doubles this test's time and checks
    torch rather than rlfast."""
    _, plain_agent, plain = _run(itrs=1, T=8)
    algo, agent, compiled = _run(compile=True, itrs=1, T=8)
    assert algo._program.path == "eager"  # the CPU: compiled loss, no graph
    for a, b in zip(compiled[0], plain[0]):
        assert a == pytest.approx(b, rel=1e-4, abs=1e-5)


def test_compile_must_be_a_bool():
    with pytest.raises(TypeError, match="compile must be True or False; got 'yes'"):
        PPO(compile="yes")
