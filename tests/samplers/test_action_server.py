"""The action server's device path, every CUDA branch of it exercised on the CPU.

``_fake_cuda.FakeCudaOps`` stands in for ``CudaOps``: its "device" is separate memory, so the
staged copies must really carry the inputs there and the actions back; its capture fails on a
host read as a CUDA capture does. Checked here: a group's device step gives ``agent.step``'s
actions, agent_info and recurrent states (resets applied as masks, without ``reset_one``) on
both paths; one copy each way and one synchronisation per step, no host read and no allocation
per step; the graph capture, its eager fallbacks and re-capture when the agent's settings
change; the page-locking bookkeeping; the alternating server's order of launches, waits and
hand-backs; and whole samplers on the staged path against SerialSampler.
"""
from __future__ import annotations

import copy
import mmap
import types

import numpy as np
import pytest
import torch

from rlfast.agents import R2d1Agent, RecurrentCategoricalPgAgent
from rlfast.models.dqn import R2d1MlpModel
from rlfast.samplers import (AlternatingSampler, CpuWaitResetCollector, GpuSampler,
                             GpuWaitResetCollector, NoOverlapAlternatingSampler)
from rlfast.samplers.buffer import get_example_outputs
from rlfast.samplers.parallel.gpu import action_server as action_server_module
from rlfast.samplers.parallel.gpu.action_server import ActionServer, AlternatingActionServer
from rlfast.samplers.parallel.gpu.inference import DeviceGroup, HostGroup, has_device_step
from rlfast.samplers.parallel.gpu.step_buffer import GroupStepBuffer, StepBuffer
from rlfast.utils.host_sync import HostSyncCounter
from rlfast.utils.processes import Deadline, mp_context
from tests.samplers._fake_cuda import FakeCudaOps, FakeCudart
from tests.samplers._gpu_helpers import (LSTM_MODEL_KWARGS, StaggeredEnv, decisive_state_dict,
                                         make_agent)
from tests.samplers.test_gpu_samplers import (TWO_WORKERS, compare_with_serial,  # noqa: F401
                                              samplers, staggered_kwargs)

B = 4


# ---- a group without worker processes -----------------------------------------------------------
def _agent(kind: str):
    """Greedy agents ("ff", "recurrent") act deterministically; "sampling-recurrent" draws
    with torch.multinomial and "r2d1" epsilon-greedily (the CPU generator)."""
    if kind in ("ff", "recurrent", "alternating"):
        return make_agent(kind, decisive_state_dict(kind != "ff"))
    if kind == "sampling-recurrent":
        return RecurrentCategoricalPgAgent(model_kwargs=dict(LSTM_MODEL_KWARGS),
                                           initial_model_state_dict=decisive_state_dict(True))
    if kind == "r2d1":
        torch.manual_seed(5)
        return R2d1Agent(ModelCls=R2d1MlpModel, eps_init=0.3,
                         model_kwargs=dict(hidden_sizes=[16], lstm_size=8))
    raise ValueError(kind)


def build_group(kind: str, Group=DeviceGroup, ops=None, use_graphs=True, agent=None):
    env = StaggeredEnv()
    agent = agent or _agent(kind)
    agent.initialize(env.spaces)
    ex = get_example_outputs(agent, env)
    example = StepBuffer(ex.observation, ex.action, np.zeros((), np.float32),
                         np.zeros((), bool), ex.agent_info)
    buffer = GroupStepBuffer(example, B, share_memory=False)
    notes = []
    extra = {}
    if Group is DeviceGroup:
        info = ex.agent_info
        extra = dict(state_example=info.prev_rnn_state if "prev_rnn_state" in info._fields
                     else None)
    group = Group(agent, buffer, [0], slice(0, B), None, notes.append, "test group", **extra)
    agent.sample_mode(0)
    agent.reset()
    group.begin_batch(ops, use_graphs)
    return agent, group, notes


def drive(group, steps: int = 10, seed: int = 3, bootstrap: bool = True) -> list:
    """Serve ``steps`` steps of random inputs and reset requests (the previous actions are
    the served ones, except where a worker wrote a null action), then bootstrap; returns
    copies of what the workers would read."""
    rng = np.random.default_rng(seed)
    step = group.buffer.np
    seen = []
    for t in range(steps):
        step.observation[:] = rng.normal(size=step.observation.shape)
        step.reward[:] = rng.normal(size=B)
        null = rng.random(B) < 0.25
        step.action[null] = 0
        step.reset[:] = (rng.random(B) < 0.3) & (t > 0)
        group.launch()
        group.finish()
        assert not step.reset.any()  # every request taken
        seen.append(copy.deepcopy((step.action.copy(), step.agent_info)))
    if bootstrap:
        step.reset[:] = [True, False, False, True]
        value = np.full(B, np.nan, dtype=np.float32)
        group.bootstrap(value if hasattr(group.agent, "value") else None)
        seen.append(value)
    return seen


def assert_same(expected: list, got: list) -> None:
    assert len(expected) == len(got)
    for want, have in zip(expected, got):
        for w, h in zip(_leaves(want), _leaves(have)):
            assert w.dtype == h.dtype and np.array_equal(w, h, equal_nan=True), (w, h)


def _leaves(x):
    if x is None:
        return []
    if isinstance(x, (tuple, list)):
        return [leaf for item in x for leaf in _leaves(item)]
    return [np.asarray(x)]


def _state(agent):
    return [s.clone() for s in agent.rnn_states.current] if agent.recurrent else []


def _forbid_reset_one(agent):
    def refuse(idx):
        raise AssertionError("the device path must reset through the mask, not reset_one")

    agent.reset_one = refuse


@pytest.mark.parametrize("kind, staged", [("ff", False), ("recurrent", False),
                                          ("sampling-recurrent", False), ("r2d1", False),
                                          ("ff", True), ("recurrent", True)])
def test_device_group_gives_the_actions_and_states_of_agent_step(kind, staged):
    """The device step with resets as masks (no reset_one) against the old path (reset_one,
    then agent.step), bit for bit: actions, agent_info (the stored start states included),
    the bootstrap value and the agent's state afterwards. Sampling agents draw from the same
    generator in the same order on the CPU path; the staged path's warm-up runs draw too, so
    it is compared with the deterministic agents."""
    torch.manual_seed(11)
    ref_agent, reference, _ = build_group(kind, HostGroup)
    expected = drive(reference)
    torch.manual_seed(11)
    agent, group, _ = build_group(kind, DeviceGroup, FakeCudaOps() if staged else None)
    _forbid_reset_one(agent)
    got = drive(group)
    assert_same(expected, got)
    for want, have in zip(_state(ref_agent), _state(agent)):
        assert torch.equal(want, have)
    if agent.recurrent:  # the reset columns of a step's start state were zeroed
        starts = [info.prev_rnn_state.h for _, info in got[:-1]]
        assert any((s == 0).all(axis=(1, 2)).any() for s in starts[1:])


@pytest.mark.parametrize("staged", [False, True], ids=["eager", "staged"])
@pytest.mark.parametrize("core", ["gru", "ln_lstm", "attention"])
def test_device_group_serves_every_memory_core(core, staged):
    """Each core's state lives in the group's fixed device tensors: resets as masks give the
    actions, agent_info and states of the host path (reset_one, then agent.step), bit for
    bit, and the state keeps its shapes from the first step to the last."""
    state_dict = decisive_state_dict(True, core=core)
    _, reference, _ = build_group("recurrent", HostGroup,
                                  agent=make_agent("recurrent", state_dict, core))
    expected = drive(reference)
    agent, group, _ = build_group("recurrent", DeviceGroup, FakeCudaOps() if staged else None,
                                  agent=make_agent("recurrent", state_dict, core))
    _forbid_reset_one(agent)
    shapes = [tuple(s.shape) for s in group._state]
    got = drive(group)
    assert_same(expected, got)
    assert [tuple(s.shape) for s in group._state] == shapes
    assert agent.rnn_states.current is group._state  # the store holds the fixed tensors
    starts = [info.prev_rnn_state for _, info in got[:-1]]
    assert all(tuple(s.shape) == (B, *shape[:1], *shape[2:])
               for st in starts for s, shape in zip(st, shapes))


def test_capture_mid_run_leaves_the_recurrent_state_as_it_was():
    """A graph captured again mid-run (new parameter storage here) starts from the state the
    agent had: the warm-up runs before the capture advance the state, and it is restored."""
    _, reference, _ = build_group("recurrent", HostGroup)
    agent, group, _ = build_group("recurrent", ops=FakeCudaOps())
    expected = drive(reference, steps=4, bootstrap=False)
    got = drive(group, steps=4, bootstrap=False)
    agent.model = copy.deepcopy(agent.model)  # same values, new storage: capture again
    group.begin_batch(group._ops, True)
    expected += drive(reference, steps=4, seed=8)
    got += drive(group, steps=4, seed=8)
    assert group.captures == 2
    assert_same(expected, got)


def test_staged_step_copies_once_each_way_and_synchronises_once():
    ops = FakeCudaOps()
    _, group, _ = build_group("recurrent", ops=ops)
    buffer = group.buffer
    drive(group, steps=2, bootstrap=False)  # the first step captures
    ops.log.clear()
    ops.copies.clear()
    steps = 5
    with HostSyncCounter() as reads:
        drive(group, steps=steps, bootstrap=False)
    assert reads.count == 0, reads.report()
    assert ops.log == ["to_device", "from_device", "record", "synchronize"] * steps
    (a, b), (c, d) = buffer.to_device, buffer.from_device
    assert ops.copies == [("to_device", b - a), ("from_device", d - c)] * steps
    # One copy each way covers what it must: inputs and mask in, actions and agent_info out.
    np_ = buffer.np
    base = buffer.block.__array_interface__["data"][0]

    def span(array):
        start = array.__array_interface__["data"][0] - base
        return start, start + array.nbytes

    for field in (np_.observation, np_.reward, buffer.reset_snapshot, np_.action):
        lo, hi = span(field)
        assert a <= lo and hi <= b
    for field in (np_.action, *_leaves(np_.agent_info)):
        lo, hi = span(field)
        assert c <= lo and hi <= d
    assert np_.observation.dtype == np.float32  # the env's dtype: uint8 frames stay uint8


def test_actions_come_back_after_the_event_not_before():
    ops = FakeCudaOps(ready_after=2)
    _, group, _ = build_group("ff", ops=ops)
    group.launch()
    assert [group.ready(), group.ready(), group.ready()] == [False, False, True]
    group.finish()
    assert ops.syncs == 1 and group.ready()
    group.finish()  # nothing pending: no second synchronisation
    assert ops.syncs == 1


def test_staged_step_allocates_nothing_per_step():
    ops = FakeCudaOps()
    _, group, notes = build_group("recurrent", ops=ops)

    def addresses():
        tensors = _leaves_t(group._inputs) + _leaves_t(group._outputs) + _leaves_t(group._state)
        tensors += [group._to_device[0], group._from_device[1]]
        return [(t.data_ptr(), tuple(t.shape)) for t in tensors]

    before = addresses()
    drive(group, steps=6)
    group.begin_batch(ops, True)  # a new batch, same settings: same graph
    drive(group, steps=3)
    assert addresses() == before
    assert len(ops.blocks) == 1 and ops.capture_attempts == 1 and group.captures == 1
    assert ops.graphs[0].replays == 9
    assert notes == ["test group: inference in a CUDA graph on cpu"]


def _leaves_t(x):
    if x is None:
        return []
    if isinstance(x, torch.Tensor):
        return [x]
    return [leaf for item in x for leaf in _leaves_t(item)]


def test_cpu_path_reads_no_host_value_per_step():
    for kind in ("recurrent", "r2d1"):
        _, group, _ = build_group(kind)
        drive(group, steps=1, bootstrap=False)
        with HostSyncCounter() as reads:
            drive(group, steps=4, bootstrap=False)
        assert reads.count == 0, reads.report()


# ---- capture and its fallbacks ------------------------------------------------------------------
class _HostReadingAgent(type(make_agent("recurrent", decisive_state_dict(True)))):
    """Reads a value back to the host inside its step: a CUDA capture fails on that."""

    def _select(self, dist_info):
        if bool(torch.isnan(dist_info.prob).any()):
            raise ValueError("NaN probabilities")
        return super()._select(dist_info)


class _DecliningAgent(type(make_agent("ff", decisive_state_dict(False)))):
    def device_step_graph_key(self):
        return None


@pytest.mark.parametrize("cause", ["capture raises", "host read", "agent declines",
                                   "graphs off"])
def test_eager_fallback_serves_the_same_actions(cause):
    ops = FakeCudaOps(capture_error=RuntimeError("capture unsupported") if cause ==
                      "capture raises" else None)
    kind = "ff" if cause in ("agent declines", "graphs off") else "recurrent"
    agent = None
    if cause == "host read":
        agent = _HostReadingAgent(model_kwargs=dict(LSTM_MODEL_KWARGS),
                                  initial_model_state_dict=decisive_state_dict(True))
    elif cause == "agent declines":
        agent = _DecliningAgent(model_kwargs=dict(hidden_sizes=[16]),
                                initial_model_state_dict=decisive_state_dict(False))
    _, reference, _ = build_group(kind, HostGroup)
    expected = drive(reference)
    _, group, notes = build_group(kind, ops=ops, use_graphs=cause != "graphs off", agent=agent)
    got = drive(group)
    group.begin_batch(ops, cause != "graphs off")  # next batch: no second attempt
    drive(group, steps=2, bootstrap=False)
    assert_same(expected, got)
    assert group._graph is None and ops.graphs == []
    expected_attempts = 1 if cause in ("capture raises", "host read") else 0
    assert ops.capture_attempts == expected_attempts
    assert len(notes) == 1 and "eager inference" in notes[0]
    why = {"capture raises": "capture failed: RuntimeError: capture unsupported",
           "host read": "operation not permitted when stream is capturing",
           "agent declines": "device_step_graph_key() is None",
           "graphs off": "CUDA graphs are off"}[cause]
    assert why in notes[0]


def test_graph_is_captured_again_when_the_agent_settings_change():
    ops = FakeCudaOps()
    agent, group, _ = build_group("ff", ops=ops)
    drive(group, steps=2, bootstrap=False)
    agent.eval_mode(1)  # greedy evaluation: another step
    group.begin_batch(ops, True)
    drive(group, steps=2, bootstrap=False)
    agent.sample_mode(2)
    group.begin_batch(ops, True)
    drive(group, steps=1, bootstrap=False)
    assert ops.capture_attempts == 3
    agent.model = copy.deepcopy(agent.model)  # new parameter storage (e.g. moved)
    group.begin_batch(ops, True)
    drive(group, steps=1, bootstrap=False)
    assert ops.capture_attempts == 4
    with torch.no_grad():  # in-place updates (the optimizer's) keep the graph
        for p in agent.model.parameters():
            p.add_(0.01)
    group.begin_batch(ops, True)
    drive(group, steps=1, bootstrap=False)
    assert ops.capture_attempts == 4


def test_noisy_dqn_in_sample_mode_declines_capture():
    from rlfast.agents import DqnAgent
    from rlfast.models.dqn import DqnMlpModel

    agent = DqnAgent(ModelCls=DqnMlpModel, model_kwargs=dict(hidden_sizes=[8], noisy=True))
    agent.initialize(StaggeredEnv().spaces)
    agent.sample_mode(0)
    assert agent.noisy and agent.device_step_graph_key() is None
    agent.eval_mode(0)  # no new noise per step: capturable
    assert agent.device_step_graph_key() is not None


def test_agents_that_override_step_keep_the_host_path():
    class OwnStep(type(make_agent("ff", decisive_state_dict(False)))):
        def step(self, observation, prev_action, prev_reward):
            return super().step(observation, prev_action, prev_reward)

    class OwnDeviceStep(type(make_agent("ff", decisive_state_dict(False)))):
        def device_step(self, observation, prev_action, prev_reward, rnn_state=None):
            return super().device_step(observation, prev_action, prev_reward, rnn_state)

    assert has_device_step(make_agent("ff", decisive_state_dict(False)))
    assert not has_device_step(OwnStep())
    assert has_device_step(OwnDeviceStep())
    from rlfast.agents import RandomAgent

    assert not has_device_step(RandomAgent())


# ---- page-locking -----------------------------------------------------------------------------
@pytest.fixture
def fake_cuda(monkeypatch):
    """Servers get FakeCudaOps and ``torch.cuda.cudart()`` a FakeCudart."""
    made, cudart = [], FakeCudart()

    def make_ops(device):
        made.append(FakeCudaOps())
        return made[-1]

    monkeypatch.setattr(ActionServer, "make_ops", staticmethod(make_ops))
    monkeypatch.setattr(torch.cuda, "cudart", lambda: cudart)
    return types.SimpleNamespace(ops=made, cudart=cudart)


def test_step_buffers_are_page_locked_while_served_and_released_at_shutdown(samplers,
                                                                             fake_cuda):
    sampler = samplers(AlternatingSampler, **staggered_kwargs(eval_n_envs=2,
                                                              eval_max_steps=10))
    agent = make_agent("ff", decisive_state_dict(False))
    sampler.initialize(agent, seed=1, affinity=TWO_WORKERS)
    assert fake_cuda.cudart.registered == []  # nothing before the agent is served
    agent.sample_mode(0)
    sampler.obtain_samples(0)
    server = sampler.action_server
    blocks = [group.buffer.block for group in server.groups + [server.eval_group]]
    expected = [(b.__array_interface__["data"][0], b.nbytes, 0) for b in blocks]
    assert fake_cuda.cudart.registered == expected
    for ptr, nbytes, _ in expected:
        assert ptr % mmap.PAGESIZE == 0 and nbytes % mmap.PAGESIZE == 0
    # Each group's block holds that group's rows and nothing else's.
    spans = sorted((p, p + n) for p, n, _ in expected)
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))
    agent.sample_mode(1)
    sampler.obtain_samples(1)
    agent.eval_mode(1)
    sampler.evaluate_agent(1)
    assert len(fake_cuda.cudart.registered) == 3  # once, not per batch
    assert fake_cuda.cudart.unregistered == []
    sampler.shutdown()
    assert fake_cuda.cudart.unregistered == [p for p, _, _ in expected]


def test_a_refused_registration_is_logged_and_sampling_goes_on(samplers, fake_cuda,
                                                              monkeypatch):
    fake_cuda.cudart.fail_with = 2
    logged = []
    monkeypatch.setattr(action_server_module.logger, "log", lambda message: logged.append(message))
    sampler = samplers(GpuSampler, **staggered_kwargs())
    agent = make_agent("ff", decisive_state_dict(False))
    sampler.initialize(agent, seed=1, affinity=TWO_WORKERS)
    agent.sample_mode(0)
    samples, _ = sampler.obtain_samples(0)
    assert samples.agent.action.shape == (10, 4)
    assert any("not page-locked" in m and "cudaError 2" in m for m in logged), logged
    sampler.shutdown()
    assert fake_cuda.cudart.unregistered == []


# ---- whole samplers on the staged path ------------------------------------------------------
@pytest.mark.parametrize("SamplerCls", [GpuSampler, AlternatingSampler,
                                        NoOverlapAlternatingSampler], ids=lambda c: c.__name__)
@pytest.mark.parametrize("recurrent", [False, True], ids=["ff", "recurrent"])
def test_staged_samplers_match_serial(samplers, fake_cuda, SamplerCls, recurrent):
    """Batches, trajectories and evaluations on the staged path (one copy each way, the
    graph replayed, the recurrent state on the "device", resets as masks) equal
    SerialSampler's."""
    common = dict(eval_n_envs=2, eval_max_steps=30)
    if recurrent:
        serial = staggered_kwargs(lives=2, max_len=14, CollectorCls=CpuWaitResetCollector,
                                  **common)
        gpu = staggered_kwargs(lives=2, max_len=14, CollectorCls=GpuWaitResetCollector,
                               **common)
    else:
        serial = gpu = staggered_kwargs(**common)
    compare_with_serial(samplers, SamplerCls, recurrent, serial, gpu,
                        ["sample", "eval", "sample", "sample"])
    (ops,) = fake_cuda.ops
    n_groups = 1 if SamplerCls is GpuSampler else 2
    assert len(ops.graphs) == n_groups + 1  # training groups and evaluation
    assert sum(g.replays for g in ops.graphs[:n_groups]) == 3 * 10 * n_groups


def test_host_reads_per_batch_do_not_grow_with_the_batch(samplers):
    counts = []
    for T in (3, 9):
        sampler = samplers(GpuSampler, **staggered_kwargs(T=T))
        agent = make_agent("recurrent", decisive_state_dict(True))
        sampler.initialize(agent, seed=1, affinity=TWO_WORKERS, bootstrap_value=True)
        agent.sample_mode(0)
        sampler.obtain_samples(0)
        with HostSyncCounter() as reads:
            sampler.obtain_samples(1)
        counts.append(reads.count)
    assert counts[0] == counts[1] <= 2, counts  # the bootstrap value's read, once per batch


# ---- the alternating order -----------------------------------------------------------------
class _Semaphore:
    def __init__(self, log, name, available=0, late=0):
        self.log, self.name, self.available, self.late = log, name, available, late

    def acquire(self, timeout=None):
        if self.late:
            self.late -= 1
            return False
        if not self.available:
            raise AssertionError(f"{self.name}: the server waits for something never sent")
        self.available -= 1
        self.log.append(self.name)
        return True

    def release(self):
        self.log.append(self.name)


class _Group:
    """Records its launches and hand-backs; ``ready_after``: None, never ready before its
    synchronisation (device work longer than the other group's stepping); k, ready from the
    k-th look on."""

    def __init__(self, name, workers, log, ready_after):
        self.name, self.workers, self.log, self.ready_after = name, workers, log, ready_after
        self.rows = slice(0, 1)
        self.looks = 0

    def launch(self):
        self.log.append(f"launch {self.name}")
        self.looks = 0

    def ready(self):
        self.looks += 1
        return self.ready_after is not None and self.looks > self.ready_after

    def finish(self):
        self.log.append(f"sync {self.name}")

    def bootstrap(self, value_out):
        self.log.append(f"bootstrap {self.name}")


def _alternating_server(log, T, ready_after, late_b=0):
    env = StaggeredEnv()
    agent = make_agent("ff", decisive_state_dict(False))
    agent.initialize(env.spaces)
    examples = get_example_outputs(agent, env)
    server = AlternatingActionServer(agent, types.SimpleNamespace(T=T, B=2), [1, 1], [0, 0],
                                     types.SimpleNamespace(agent={}), examples, mp_context())
    server.supervisor = types.SimpleNamespace(check_alive=lambda: None)
    server._deadline = Deadline(None)
    server.groups = [_Group("A", [0], log, ready_after), _Group("B", [1], log, ready_after)]
    for w, sync in enumerate(server.sync):
        sync.obs_ready = _Semaphore(log, f"obs {w}", available=T + 1,
                                    late=late_b if w == 1 else 0)
        sync.act_ready = _Semaphore(log, f"actions {w}")
    return server


def test_alternating_server_launches_one_group_before_waiting_for_the_other():
    """Device work that outlasts the other group's stepping: group A's inference is launched,
    then B's observations are awaited, then A is synchronised and released, and so on."""
    log = []
    _alternating_server(log, T=2, ready_after=None)._serve_batch()
    assert log == ["obs 0", "launch A", "obs 1", "sync A", "actions 0", "launch B",
                   "obs 0", "sync B", "actions 1", "launch A",
                   "obs 1", "sync A", "actions 0", "launch B",
                   "obs 0", "sync B", "actions 1", "obs 1", "bootstrap A", "bootstrap B"]


def test_alternating_server_hands_back_as_soon_as_the_actions_arrive():
    """Group B's observations are late; A's actions arrive meanwhile (the third look) and A
    is released then, before B's observations come."""
    log = []
    _alternating_server(log, T=1, ready_after=2, late_b=6)._serve_batch()
    assert log[:6] == ["obs 0", "launch A", "sync A", "actions 0", "obs 1", "launch B"]


def test_alternating_server_on_the_cpu_releases_each_group_right_after_it():
    """Inference finished at launch (the CPU): the order of the servers before the overlap,
    each group released before the other's observations are awaited."""
    log = []
    _alternating_server(log, T=2, ready_after=0)._serve_batch()
    assert log == ["obs 0", "launch A", "sync A", "actions 0", "obs 1", "launch B",
                   "sync B", "actions 1", "obs 0", "launch A", "sync A", "actions 0",
                   "obs 1", "launch B", "sync B", "actions 1", "obs 0", "obs 1",
                   "bootstrap A", "bootstrap B"]


# ---- on a GPU: the real CUDA path --------------------------------------------------------------
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("SamplerCls", [GpuSampler, AlternatingSampler], ids=lambda c: c.__name__)
@pytest.mark.parametrize("recurrent", [False, True], ids=["ff", "recurrent"])
def test_cuda_graph_path_matches_serial(samplers, SamplerCls, recurrent, monkeypatch):
    """With the agent on CUDA: page-locked step buffers, a captured graph per group, and the
    batches of SerialSampler on the CPU (the greedy actions exactly, floats to rounding; TF32
    off so that float32 means float32 on both)."""
    from tests.samplers._gpu_helpers import leaves
    from tests.samplers.test_gpu_samplers import agent_kind, batches

    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", False)
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)

    state_dict = decisive_state_dict(recurrent)
    kwargs = (staggered_kwargs(lives=2, max_len=14, CollectorCls=GpuWaitResetCollector)
              if recurrent else staggered_kwargs())
    serial_kwargs = dict(kwargs, CollectorCls=CpuWaitResetCollector) if recurrent else kwargs
    from rlfast.samplers import SerialSampler

    results = []
    for Cls, sampler_kwargs in ((SerialSampler, serial_kwargs), (SamplerCls, kwargs)):
        agent = make_agent(agent_kind(Cls, recurrent), state_dict)
        sampler = samplers(Cls, **sampler_kwargs)
        sampler.initialize(agent, seed=21, affinity=TWO_WORKERS, bootstrap_value=True)
        if Cls is not SerialSampler:
            agent.to_device(0)
        runs = []
        for itr in range(3):
            agent.sample_mode(itr)
            samples, _ = sampler.obtain_samples(itr)
            runs.append(("sample", copy.deepcopy(samples), None))
        results.append(batches(runs))
    for want, have in zip(*results):
        want, have = leaves(want), leaves(have)
        assert sorted(want) == sorted(have)
        for name, w in want.items():
            if name.startswith("agent.") and w.is_floating_point():
                torch.testing.assert_close(have[name], w, rtol=1e-4, atol=1e-5, msg=name)
            else:
                assert torch.equal(have[name], w), name
    server = sampler.action_server
    assert all(group.captures == 1 for group in server.groups)
    assert len(server._registration.registered) == len(server.groups) + 1
