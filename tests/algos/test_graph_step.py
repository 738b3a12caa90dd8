"""The replay learners' step program (``compile=True``): the same updates as the plain step.

The CUDA graph itself needs a GPU; what is checked here, on the CPU, is everything around it:
the data flow through the program's static buffers (the replayed batch, the diagnostics row,
the priorities, the sticky failure flag feeding the fused optimizer's ``found_inf``) gives bit
for bit the plain learner's weights and diagnostics, for DQN, C51, R2D1, SAC and TD3 (whose
critic-only updates take the plain step); the warm-up and capture runs never
move a weight; a capture that fails falls back to the eager body and says why; a non-finite step
inside the program stops every later one; and the host is read as rarely as without it.
"""
from __future__ import annotations

import logging

import pytest
import torch

from rlfast.algos import graph_step
from rlfast.utils.finite import NonFiniteError
from rlfast.utils.host_sync import HostSyncCounter

from tests.algos import _replay_setups
from tests.algos.test_nonfinite import _nan_grad_from_call


def _train(kind: str, capture=None, itrs: int = 5, poison=None, **algo_kwargs):
    algo, sample = _replay_setups.setup(kind, **algo_kwargs)
    algo.program_capture = capture
    if poison is not None:
        poison(algo.agent)
    infos = [algo.optimize_agent(itr, sample(itr)) for itr in range(itrs)]
    return algo, infos


def _weights(algo):
    """Every tensor of the agent's state (models and targets), by dotted name."""
    out = {}

    def walk(prefix, value):
        if isinstance(value, torch.Tensor):
            out[prefix] = value.detach().clone()
        elif isinstance(value, dict):
            for k, v in value.items():
                walk(f"{prefix}.{k}" if prefix else str(k), v)

    walk("", algo.agent.state_dict())
    assert out
    return out


def _replaying_capture(calls):
    """A stand-in for capture_cuda_graph: runs the body for warm-up and 'capture' as the
    real one does, then replays by running it."""
    def capture(body):
        for _ in range(graph_step.WARMUP_STEPS + 1):
            body()
        calls.append("captured")
        return body
    return capture


@pytest.mark.parametrize("prioritized", [False, True], ids=["uniform", "prioritized"])
@pytest.mark.parametrize("kind", _replay_setups.ALL_KINDS)
def test_the_program_gives_the_plain_updates_bit_for_bit(kind, prioritized):
    plain, plain_infos = _train(kind, prioritized_replay=prioritized)
    program, infos = _train(kind, capture=graph_step.eager_program,
                            prioritized_replay=prioritized)
    programs = getattr(program, "_programs", None) or {0: program._program}
    assert programs and all(p.path == "eager" for p in programs.values())
    assert infos == plain_infos
    assert program.update_counter == plain.update_counter > 0
    for name, tensor in _weights(program).items():
        assert torch.equal(tensor, _weights(plain)[name]), name
    if prioritized:
        assert torch.equal(torch.as_tensor(program.replay_buffer.priority_tree.tree),
                           torch.as_tensor(plain.replay_buffer.priority_tree.tree))


def test_td3_critic_only_updates_stay_plain():
    """A program keeps every gradient allocated (zeros where no loss reached): Adam would then
    move the actor on critic-only updates by its momentum. Those updates take the plain step."""
    algo, _ = _train("td3", capture=graph_step.eager_program)
    assert set(algo._programs) == {True}


@pytest.mark.parametrize("kind", ["dqn", "sac"])
def test_warm_up_and_capture_never_move_a_weight(kind):
    calls = []
    algo, sample = _replay_setups.setup(kind)
    for itr in range(2):  # fill the replay; learning starts at the next call
        algo.optimize_agent(itr, sample(itr))
    algo.program_capture = _replaying_capture(calls)
    before = _weights(algo)
    batch = algo.replay_buffer.sample_batch(algo.replay_batch_size)
    program = algo.graph_step(batch, True) if kind == "sac" else algo.graph_step(batch)
    assert calls == ["captured"] and program.path == "cuda-graph"
    for name, tensor in _weights(algo).items():
        assert torch.equal(tensor, before[name]), f"{name} moved during warm-up"
    assert all(isinstance(g["lr"], torch.Tensor) for g in algo.optimizer.param_groups)
    algo.optimizer.param_groups[0]["lr"] = 0.5  # a scheduler that assigns a float
    program.begin()
    assert program.rates.rates[0].item() == 0.5
    assert algo.optimizer.param_groups[0]["lr"] is program.rates.rates[0]
    info = algo.optimize_agent(2, sample(2))  # replays train
    assert len(info[0]) > 0 and not all(
        torch.equal(t, before[n]) for n, t in _weights(algo).items())


def test_a_capture_that_fails_falls_back_to_the_eager_body(caplog):
    def failing(body):
        raise RuntimeError("operation not permitted when stream is capturing")

    plain, plain_infos = _train("dqn")
    with caplog.at_level(logging.WARNING, logger=graph_step.__name__):
        algo, infos = _train("dqn", capture=failing)
    assert algo._program.path.startswith("eager (fallback: RuntimeError: operation not")
    assert "could not be captured" in caplog.text
    assert infos == plain_infos
    assert all(not isinstance(g["lr"], torch.Tensor) and not g["capturable"]
               for g in algo.optimizer.param_groups)
    for name, tensor in _weights(algo).items():
        assert torch.equal(tensor, _weights(plain)[name]), name


def test_a_nonfinite_step_inside_the_program_stops_every_later_step():
    """The 3rd of a call's 4 gradient steps has a NaN gradient: the program's failure flag
    refuses it and the 4th; the call raises naming it after its read, the update counter
    counts the 2 steps taken, and the weights are those of a run that took only those 2."""
    def run(poison: bool, steps: int):
        algo, sample = _replay_setups.setup("dqn")
        algo.program_capture = graph_step.eager_program
        algo.optimize_agent(0, sample(0))  # fills the replay; learning starts at itr 1
        assert algo.updates_per_optimize == 4 and algo.learning(1)
        algo.updates_per_optimize = steps
        if poison:
            _nan_grad_from_call(algo.agent.model, first_bad=3)
        return algo, sample(1)

    reference, samples = run(poison=False, steps=2)
    reference.optimize_agent(1, samples)
    algo, samples = run(poison=True, steps=4)
    with pytest.raises(NonFiniteError, match=r"^DQN: gradNorm is nan at iteration 1;"):
        algo.optimize_agent(1, samples)
    assert algo.update_counter == 2
    for name, tensor in _weights(algo).items():
        assert torch.equal(tensor, _weights(reference)[name]), name


@pytest.mark.parametrize("prioritized, per_step", [(False, False), (True, True)])
@pytest.mark.parametrize("kind", _replay_setups.KINDS)
def test_the_program_reads_the_host_as_rarely_as_the_plain_step(kind, prioritized, per_step):
    algo, sample = _replay_setups.setup(kind, prioritized_replay=prioritized)
    algo.program_capture = graph_step.eager_program
    for itr in range(3):
        algo.optimize_agent(itr, sample(itr))
    algo.replay_buffer.append_samples(algo.samples_to_buffer(sample(3)))
    steps = algo.update_counter
    with HostSyncCounter() as syncs:
        algo.optimize_agent(3, None)
    steps = algo.update_counter - steps
    assert syncs.count == (steps if per_step else 1), syncs.report()


def test_noisy_networks_take_the_plain_step():
    """Sampling replaces a noisy layer's noise tensors, which a captured graph would not see."""
    from rlfast.agents import DqnAgent
    from rlfast.algos import DQN
    algo = DQN()
    algo.program_capture = graph_step.eager_program
    algo.agent = DqnAgent(model_kwargs=dict(hidden_sizes=[8], noisy=True))
    algo.agent.initialize(_replay_setups.CARTPOLE_SPACES)
    algo.optim_initialize()
    assert algo.agent.noisy and algo.guarded_steps.skips_on_device
    assert algo.graph_step(None) is None
