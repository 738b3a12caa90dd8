"""Tests for rlfast.agents.base: BaseAgent, RandomAgent and the recurrent-state mixins."""
import numpy as np
import pytest
import torch

from rlfast.agents import (AgentInputs, AgentStep, AlternatingRecurrentAgentMixin, BaseAgent,
                           RandomAgent, RecurrentAgentMixin)
from rlfast.agents.base import rnn_state_for_storage
from rlfast.envs import make
from rlfast.utils.collections import namedarraytuple

State = namedarraytuple("State", ["h", "c"])


@pytest.fixture(scope="module")
def cartpole_spaces():
    return make("CartPole-v1").spaces


@pytest.fixture(scope="module")
def pendulum_spaces():
    return make("Pendulum-v1").spaces


class TinyModel(torch.nn.Module):
    """Linear map from the flat observation; records its constructor arguments."""

    def __init__(self, observation_size, out_size=2, bias_value=0.0):
        super().__init__()
        self.kwargs = dict(observation_size=observation_size, out_size=out_size)
        self.linear = torch.nn.Linear(observation_size, out_size)
        torch.nn.init.constant_(self.linear.bias, bias_value)

    def forward(self, observation):
        return self.linear(observation)


class TinyAgent(BaseAgent):
    def make_env_to_model_kwargs(self, env_spaces):
        return dict(observation_size=int(np.prod(env_spaces.observation.shape)))

    def step(self, observation, prev_action, prev_reward):
        return AgentStep(action=self.model(observation).argmax(-1), agent_info=None)


class TinyRecurrentAgent(RecurrentAgentMixin, TinyAgent):
    pass


class TinyAlternatingAgent(AlternatingRecurrentAgentMixin, TinyAgent):
    pass


def _state(B, value=None, N=1, H=3):
    if value is None:
        h = torch.arange(N * B * H, dtype=torch.float32).reshape(N, B, H) + 1
    else:
        h = torch.full((N, B, H), float(value))
    return State(h=h, c=-h.clone())


# ---- BaseAgent --------------------------------------------------------------------------------

def test_initialize_builds_model_from_env_and_model_kwargs(cartpole_spaces):
    agent = TinyAgent(ModelCls=TinyModel, model_kwargs=dict(out_size=5))
    assert agent.model is None
    agent.initialize(cartpole_spaces, global_B=4, env_ranks=[0, 1, 2, 3])
    assert isinstance(agent.model, TinyModel)
    assert agent.model.kwargs == dict(observation_size=4, out_size=5)
    assert agent.env_spaces is cartpole_spaces
    assert agent.global_B == 4 and agent.env_ranks == [0, 1, 2, 3]
    assert agent.shared_model is None
    assert [p.shape for p in agent.parameters()] == [torch.Size([5, 4]), torch.Size([5])]


def test_initialize_without_model_class_raises(cartpole_spaces):
    with pytest.raises(ValueError, match="ModelCls"):
        TinyAgent().initialize(cartpole_spaces)


def test_initial_state_dict_and_state_dict_round_trip(cartpole_spaces):
    source = TinyAgent(ModelCls=TinyModel, model_kwargs=dict(bias_value=3.0))
    source.initialize(cartpole_spaces)
    agent = TinyAgent(ModelCls=TinyModel, initial_model_state_dict=source.state_dict())
    agent.initialize(cartpole_spaces)
    for key, value in source.state_dict().items():
        assert torch.equal(agent.state_dict()[key], value)
    assert torch.all(agent.model.linear.bias == 3.0)
    fresh = TinyAgent(ModelCls=TinyModel)
    fresh.initialize(cartpole_spaces)
    assert not torch.all(fresh.model.linear.bias == 3.0)
    fresh.load_state_dict(agent.state_dict())
    assert torch.equal(fresh.model.linear.weight, agent.model.linear.weight)
    # A DistributedDataParallel-style "module." prefix is stripped on load.
    fresh.load_state_dict({"module." + k: v + 1 for k, v in agent.state_dict().items()})
    assert torch.allclose(fresh.model.linear.bias, agent.model.linear.bias + 1)


def test_share_memory_puts_parameters_in_shared_memory(cartpole_spaces):
    agent = TinyAgent(ModelCls=TinyModel)
    agent.initialize(cartpole_spaces, share_memory=True)
    assert agent.shared_model is agent.model
    assert all(p.is_shared() for p in agent.parameters())
    private = TinyAgent(ModelCls=TinyModel)
    private.initialize(cartpole_spaces, share_memory=False)
    assert not any(p.is_shared() for p in private.parameters())


def test_the_agent_carries_no_transport():
    """Moving parameters between processes is rlfast.agents.param_sharing's job: the agent
    only names the models that are trained."""
    assert BaseAgent.trained_model_names == ("model",)
    for name in ("data_parallel", "undo_data_parallel", "ddp_wrap", "async_share", "async_cpu",
                 "send_shared_memory", "recv_shared_memory", "sampler_param_updates",
                 "sync_shared_memory", "training_twin", "publish_to"):
        assert not hasattr(BaseAgent, name), name


def test_mode_switches_set_module_training_flag(cartpole_spaces):
    agent = TinyAgent(ModelCls=TinyModel)
    agent.initialize(cartpole_spaces)
    agent.train_mode(0)
    assert agent.model.training and agent._mode == "train"
    agent.sample_mode(0)
    assert not agent.model.training and agent._mode == "sample"
    agent.train_mode(1)
    assert agent.model.training
    agent.eval_mode(1)
    assert not agent.model.training and agent._mode == "eval"
    agent.to_device(None)  # a no-op on CPU-only runs
    assert agent.device == torch.device("cpu")


class _NestedModel(torch.nn.Module):
    """Dropout deep inside, so a stale training flag would change outputs."""

    def __init__(self, **kwargs):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Sequential(
            torch.nn.Dropout(0.5), torch.nn.Linear(8, 2)))

    def forward(self, observation, prev_action, prev_reward):
        return self.body(observation)


class _CountingTrain(torch.nn.Module):
    """Overrides train(): the agent must call it rather than set the flags itself."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def train(self, mode: bool = True):
        self.calls.append(mode)
        return super().train(mode)


def test_mode_switches_reach_every_submodule(cartpole_spaces):
    agent = TinyAgent(ModelCls=_NestedModel)
    agent.initialize(cartpole_spaces)
    for switch, flag in [(agent.train_mode, True), (agent.sample_mode, False),
                         (agent.train_mode, True), (agent.eval_mode, False)]:
        switch(0)
        assert [m.training for m in agent.model.modules()] == [flag] * 6
    # A new model (e.g. a reloaded or wrapped one) is walked afresh.
    agent.model = _NestedModel()
    agent.model.eval()
    agent.train_mode(1)
    assert all(m.training for m in agent.model.modules())
    # A module that overrides train() gets its train() called.
    counting = _CountingTrain()
    agent.model = torch.nn.Sequential(torch.nn.Linear(4, 2), counting)
    agent.model.eval()
    counting.calls.clear()
    agent.train_mode(2)
    agent.sample_mode(2)
    assert counting.calls == [True, False] and not agent.model[0].training


def test_to_model_inputs_keeps_structure(cartpole_spaces):
    agent = TinyAgent(ModelCls=TinyModel)
    agent.initialize(cartpole_spaces)
    inputs = AgentInputs(torch.ones(2, 4), torch.zeros(2, dtype=torch.long), torch.zeros(2))
    out = agent.to_model_inputs(*inputs)
    assert isinstance(out, tuple) and len(out) == 3
    assert torch.equal(out[0], inputs.observation)


# ---- RandomAgent ------------------------------------------------------------------------------

def test_random_agent_discrete_actions(cartpole_spaces):
    agent = RandomAgent()
    agent.initialize(cartpole_spaces)
    agent.sample_mode(0)
    B = 64
    step = agent.step(torch.zeros(B, 4), torch.zeros(B, dtype=torch.long), torch.zeros(B))
    assert isinstance(step, AgentStep) and step.agent_info is None
    assert step.action.shape == (B,) and not step.action.is_floating_point()
    values = set(step.action.tolist())
    assert values <= {0, 1} and values == {0, 1}  # 64 fair draws: both occur (p_fail ~ 1e-19)
    single = agent.step(torch.zeros(4), torch.zeros((), dtype=torch.long), torch.zeros(()))
    assert single.action.shape == () and int(single.action) in (0, 1)
    assert torch.equal(agent.value(torch.zeros(B, 4), torch.zeros(B), torch.zeros(B)),
                       torch.zeros(B))
    assert agent.state_dict() == {}


def test_random_agent_continuous_actions(pendulum_spaces):
    agent = RandomAgent()
    agent.initialize(pendulum_spaces)
    B = 50
    step = agent.step(torch.zeros(B, 3), torch.zeros(B, 1), torch.zeros(B))
    assert step.action.shape == (B, 1) and step.action.dtype == torch.float32
    assert torch.all(step.action >= -2.0) and torch.all(step.action <= 2.0)
    assert step.action.std() > 0.1  # not a constant
    for a in step.action.numpy():
        assert pendulum_spaces.action.contains(a)


# ---- RecurrentAgentMixin ----------------------------------------------------------------------

def test_recurrent_reset_one_zeros_exactly_one_column(cartpole_spaces):
    agent = TinyRecurrentAgent(ModelCls=TinyModel)
    agent.initialize(cartpole_spaces)
    assert agent.recurrent and agent.prev_rnn_state is None
    agent.reset_one(idx=1)  # no state yet: nothing to do, no error
    state = _state(B=4)
    reference = state.h.clone()
    agent.advance_rnn_state(state)
    agent.reset_one(idx=2)
    h, c = agent.prev_rnn_state
    assert torch.all(h[:, 2] == 0) and torch.all(c[:, 2] == 0)
    for b in (0, 1, 3):
        assert torch.equal(h[:, b], reference[:, b]) and torch.equal(c[:, b], -reference[:, b])
    agent.reset()
    assert agent.prev_rnn_state is None


def test_recurrent_train_and_eval_stash_sample_state(cartpole_spaces):
    agent = TinyRecurrentAgent(ModelCls=TinyModel)
    agent.initialize(cartpole_spaces)
    agent.sample_mode(0)
    sample_state = _state(B=2, value=5.0)
    agent.advance_rnn_state(sample_state)
    agent.train_mode(0)
    assert agent.prev_rnn_state is None
    agent.advance_rnn_state(_state(B=7, value=-1.0))  # training-time state must not leak
    agent.eval_mode(0)
    assert agent.prev_rnn_state is None
    agent.advance_rnn_state(_state(B=3, value=9.0))
    agent.sample_mode(1)
    assert agent.prev_rnn_state is sample_state
    # sample -> sample keeps the current state (no restore from the stash).
    newer = _state(B=2, value=6.0)
    agent.advance_rnn_state(newer)
    agent.sample_mode(2)
    assert agent.prev_rnn_state is newer
    # sample -> eval -> sample restores the latest sample state.
    agent.eval_mode(2)
    assert agent.prev_rnn_state is None
    agent.sample_mode(3)
    assert agent.prev_rnn_state is newer


def test_rnn_state_for_storage_transposes_batch_first():
    state = _state(B=3, N=2, H=4)
    stored = rnn_state_for_storage(state)
    assert isinstance(stored, State) and stored.h.shape == (3, 2, 4)
    assert torch.equal(stored.h[1, 0], state.h[0, 1])
    assert rnn_state_for_storage(None) is None


# ---- AlternatingRecurrentAgentMixin -----------------------------------------------------------

def test_alternating_agent_keeps_two_states(cartpole_spaces):
    agent = TinyAlternatingAgent(ModelCls=TinyModel)
    agent.initialize(cartpole_spaces)
    assert agent.alternating and agent.recurrent
    agent.sample_mode(0)
    assert agent.prev_rnn_state is None
    a1, b1, a2, b2 = (_state(B=2, value=v) for v in (1, 2, 3, 4))
    agent.advance_rnn_state(a1)  # group A stepped; group B is next, it has no state yet
    assert agent.prev_rnn_state is None
    agent.advance_rnn_state(b1)  # group B stepped; group A is next
    assert agent.prev_rnn_state is a1
    agent.advance_rnn_state(a2)
    assert agent.prev_rnn_state is b1
    agent.advance_rnn_state(b2)
    assert agent.prev_rnn_state is a2
    # reset_one acts on the state of the group about to step.
    agent.reset_one(idx=0)
    assert torch.all(a2.h[:, 0] == 0) and torch.all(a2.h[:, 1] == 3) and torch.all(b2.h == 4)
    # Stash in train/eval, restore both states (group A first) in sample mode.
    agent.train_mode(0)
    assert agent.prev_rnn_state is None
    agent.advance_rnn_state(_state(B=5, value=7))
    agent.eval_mode(0)
    agent.sample_mode(1)
    assert agent.prev_rnn_state is a2
    agent.advance_rnn_state(_state(B=2, value=8))
    assert agent.prev_rnn_state is b2
    agent.reset()
    assert agent.prev_rnn_state is None
    agent.advance_rnn_state(a1)
    assert agent.prev_rnn_state is None  # the pair was cleared too


class ModeRecordingAgent(TinyAgent):
    """Records every mode switch that reaches it, like EpsilonGreedyAgentMixin reacts to them."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.switches = []

    def train_mode(self, itr):
        super().train_mode(itr)
        self.switches.append(("train", itr))

    def sample_mode(self, itr):
        super().sample_mode(itr)
        self.switches.append(("sample", itr))

    def eval_mode(self, itr):
        super().eval_mode(itr)
        self.switches.append(("eval", itr))


class AlternatingRecordingAgent(AlternatingRecurrentAgentMixin, ModeRecordingAgent):
    pass


class RecurrentRecordingAgent(RecurrentAgentMixin, ModeRecordingAgent):
    pass


@pytest.mark.parametrize("Agent", [AlternatingRecordingAgent, RecurrentRecordingAgent])
def test_recurrent_mixins_mode_switches_reach_the_rest_of_the_agent(cartpole_spaces, Agent):
    # The alternating mixin used to call BaseAgent's mode switches directly, skipping the
    # classes between (an alternating R2D1 agent never set its epsilon).
    agent = Agent(ModelCls=TinyModel)
    agent.initialize(cartpole_spaces)
    agent.sample_mode(3)
    agent.advance_rnn_state(_state(B=2, value=1.0))
    agent.train_mode(4)
    agent.eval_mode(5)
    agent.sample_mode(6)
    assert agent.switches == [("sample", 3), ("train", 4), ("eval", 5), ("sample", 6)]
    assert agent._mode == "sample" and not agent.model.training
    assert torch.all(agent.prev_rnn_state.h == 1.0)  # the sampling state came back


def test_mixins_do_not_stack():
    assert not issubclass(AlternatingRecurrentAgentMixin, RecurrentAgentMixin)
    assert AlternatingRecurrentAgentMixin.rnn_groups == 2 and RecurrentAgentMixin.rnn_groups == 1


def test_use_group_points_at_each_groups_state(cartpole_spaces):
    agent = TinyAlternatingAgent(ModelCls=TinyModel)
    agent.initialize(cartpole_spaces)
    agent.sample_mode(0)
    a, b = _state(B=2, value=1.0), _state(B=2, value=2.0)
    agent.advance_rnn_state(a)
    agent.advance_rnn_state(b)
    agent.use_group(1)
    assert agent.prev_rnn_state is b
    agent.use_group(0)
    assert agent.prev_rnn_state is a
    assert not hasattr(TinyRecurrentAgent(ModelCls=TinyModel), "use_group")


def test_feedforward_agents_keep_no_recurrent_state(cartpole_spaces):
    agent = TinyAgent(ModelCls=TinyModel)
    agent.initialize(cartpole_spaces)
    assert agent.rnn_states is None and agent.prev_rnn_state is None
    agent.reset()
    agent.reset_one(0)  # nothing to forget, no error


def test_base_agent_step_is_abstract():
    class NoStep(BaseAgent):
        pass

    with pytest.raises(TypeError, match="step"):
        NoStep(ModelCls=TinyModel)
    RandomAgent()  # defines step: instantiates
