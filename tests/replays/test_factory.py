"""make_replay_buffer: every valid combination of options maps to its class and builds a working
buffer; invalid combinations raise ValueError saying why (the async_ variants: test_async.py)."""
import itertools
from collections import namedtuple

import numpy as np
import pytest

import rlfast.replays as replays
from rlfast.replays import make_replay_buffer, replay_buffer_class

FLAGS = ("prioritized", "frames", "sequence", "time_limit")
# What each combination of (prioritized, frames, sequence, time_limit) must give, written out.
EXPECTED = {
    (False, False, False, False): "UniformReplayBuffer",
    (True, False, False, False): "PrioritizedReplayBuffer",
    (False, True, False, False): "UniformReplayFrameBuffer",
    (True, True, False, False): "PrioritizedReplayFrameBuffer",
    (False, False, True, False): "UniformSequenceReplayBuffer",
    (True, False, True, False): "PrioritizedSequenceReplayBuffer",
    (False, True, True, False): "UniformSequenceReplayFrameBuffer",
    (True, True, True, False): "PrioritizedSequenceReplayFrameBuffer",
    (False, False, False, True): "TlUniformReplayBuffer",
    (True, False, False, True): "TlPrioritizedReplayBuffer",
}
ALL = list(itertools.product((False, True), repeat=4))
INVALID = [combo for combo in ALL if combo not in EXPECTED]

Sample = namedtuple("Sample", ["observation", "action", "reward", "done", "timeout",
                               "prev_rnn_state"])


def _example(frames: bool) -> Sample:
    observation = np.zeros((4, 3, 3), np.uint8) if frames else np.zeros(3, np.float32)
    return Sample(observation=observation, action=np.zeros((), np.int64),
                  reward=np.zeros((), np.float32), done=np.zeros((), bool),
                  timeout=np.zeros((), bool), prev_rnn_state=np.zeros(5, np.float32))


def _kwargs(frames: bool, sequence: bool) -> dict:
    kwargs = dict(example=_example(frames), size=64, B=2, discount=0.9, n_step_return=2)
    if sequence:
        kwargs.update(rnn_state_interval=4, batch_T=4)
    return kwargs


def test_the_table_covers_every_combination():
    assert len(EXPECTED) + len(INVALID) == 16
    assert all(combo[3] and (combo[1] or combo[2]) for combo in INVALID)


@pytest.mark.parametrize("combo", list(EXPECTED), ids=lambda c: EXPECTED[c])
def test_valid_combination_maps_to_its_class(combo):
    options = dict(zip(FLAGS, combo))
    cls = getattr(replays, EXPECTED[combo])
    assert replay_buffer_class(**options) is cls
    buffer = make_replay_buffer(**options, **_kwargs(combo[1], combo[2]))
    assert type(buffer) is cls
    assert buffer.frame_based == combo[1]
    if combo[0]:
        assert buffer.priority_tree is not None and buffer.beta == pytest.approx(0.4)
    else:
        assert buffer.priority_tree is None


@pytest.mark.parametrize("combo", list(EXPECTED), ids=lambda c: EXPECTED[c])
def test_built_buffers_append_and_sample(combo):
    prioritized, frames, sequence, time_limit = combo
    kwargs = _kwargs(frames, sequence)
    buffer = make_replay_buffer(prioritized=prioritized, frames=frames, sequence=sequence,
                                time_limit=time_limit, **kwargs)
    T_in, B = 16, 2
    samples = Sample(*(np.broadcast_to(x, (T_in, B) + np.shape(x)).copy()
                       for x in kwargs["example"]))
    samples.reward[:] = np.arange(T_in)[:, None]
    buffer.append_samples(samples)
    batch = buffer.sample_batch(3)
    assert hasattr(batch, "is_weights") == prioritized
    assert hasattr(batch, "init_rnn_state") == sequence
    assert hasattr(batch, "bootstrap_discount") == time_limit


def test_defaults_give_the_plain_uniform_buffer():
    assert replay_buffer_class() is replays.UniformReplayBuffer


@pytest.mark.parametrize("combo", INVALID, ids=str)
def test_invalid_combination_raises_and_names_the_valid_ones(combo):
    options = dict(zip(FLAGS, combo))
    with pytest.raises(ValueError) as err:
        make_replay_buffer(**options, **_kwargs(combo[1], combo[2]))
    message = str(err.value)
    assert "time_limit=True" in message
    assert f"frames={combo[1]}" in message and f"sequence={combo[2]}" in message
    for valid in ("plain", "frames", "sequence", "frames+sequence", "time_limit"):
        assert repr(valid) in message
