"""Info keys that come and go across environment instances.

Every ``GymEnvWrapper`` fixes its env_info layout at its own first step, and the samples buffer
is sized from one example step of a separate instance. An env whose info keys (or their
shapes) vary can therefore hand the collector an env_info that does not fit the buffer; that
used to fail inside numpy ("setting an array element with a sequence", "could not broadcast")
without naming the cause. Now the write names the key, the environment and the cure
(``rlfast.envs.EnvInfoWrapper``), and the cure works.

The env here decides by instance parity (a class counter reset per test) whether it reports
``x`` (or which shape ``x`` has), so that with two training envs beside the example env some
instance always disagrees with the example, whatever order the sampler makes them in.
"""
import gymnasium
import numpy as np
import pytest
from gymnasium import spaces as gs

from rlfast.agents import CategoricalPgAgent
from rlfast.envs import EnvInfoWrapper, GymEnvWrapper
from rlfast.samplers import CpuResetCollector, SerialSampler
from rlfast.samplers.buffer import EnvInfoBuffer


class ParityInfoEnv(gymnasium.Env):
    """Reports info ``x`` by instance parity: ``mode="presence"`` gives even instances an ``x``
    and odd ones none; ``mode="shape"`` gives ``x`` shape (1,) or (3,)."""

    observation_space = gs.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gs.Discrete(2)
    instances = 0

    def __init__(self, mode: str):
        self.mode = mode
        self.parity = ParityInfoEnv.instances % 2
        ParityInfoEnv.instances += 1
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.t += 1
        if self.mode == "presence":
            info = {"x": 1.0} if self.parity == 0 else {}
        else:
            info = {"x": np.zeros(1 + 2 * self.parity)}
        return np.zeros(2, np.float32), 1.0, False, self.t >= 5, info


def make_parity_env(mode: str, info_example=None, drop_other_keys: bool = False):
    env = ParityInfoEnv(mode)
    if info_example is not None:
        env = EnvInfoWrapper(env, info_example, drop_other_keys=drop_other_keys)
    return GymEnvWrapper(env)


@pytest.fixture(autouse=True)
def fresh_counter():
    ParityInfoEnv.instances = 0


def sample_once(**env_kwargs):
    sampler = SerialSampler(EnvCls=make_parity_env, env_kwargs=env_kwargs, batch_T=4, batch_B=2,
                            CollectorCls=CpuResetCollector, max_decorrelation_steps=0)
    sampler.initialize(CategoricalPgAgent(), seed=0)
    try:
        samples, _ = sampler.obtain_samples(0)
    finally:
        sampler.shutdown()
    return samples


def test_missing_info_key_names_key_env_and_cure():
    with pytest.raises(ValueError) as caught:
        sample_once(mode="presence")
    message = str(caught.value)
    assert "env_info from ParityInfoEnv does not fit the samples buffer" in message
    assert "['x']" in message
    assert "rlfast.envs.EnvInfoWrapper(env, info_example={'x': <default value>})" in message


def test_info_value_changing_shape_names_key_env_and_cure():
    with pytest.raises(ValueError, match=r"ParityInfoEnv.*key 'x' has shape \((1|3),\) here but "
                                         r"\((3|1),\) in the example step.*drop_other_keys=True"):
        sample_once(mode="shape")


def test_the_named_cures_work():
    samples = sample_once(mode="presence", info_example={"x": 0.0})
    x = samples.env.env_info.x
    assert x.shape == (4, 2) and set(np.unique(x.numpy()).tolist()) <= {0.0, 1.0}
    samples = sample_once(mode="shape", info_example={}, drop_other_keys=True)
    assert samples.env.env_info._fields == ("timeout",)


def test_env_info_buffer_keeps_checking_through_indexing_and_pickling():
    import pickle

    from rlfast.utils.buffer import buffer_from_example
    from rlfast.utils.collections import NamedTupleSchema
    Info = NamedTupleSchema("EnvInfo", ["x", "timeout"])
    plain = buffer_from_example(Info(x=np.zeros(2), timeout=False), (3, 2))
    checked = EnvInfoBuffer.wrap(plain, "SomeEnv-v0")
    checked[1, 0] = Info(x=np.ones(2), timeout=True)  # a matching write goes through
    assert checked.x[1, 0].tolist() == [1.0, 1.0] and bool(checked.timeout[1, 0])
    row = checked[2]
    assert isinstance(row, EnvInfoBuffer)
    row[:] = 0  # broadcasting a scalar is not an env_info write
    Other = NamedTupleSchema("EnvInfo", ["timeout"])
    for target in (row, pickle.loads(pickle.dumps(checked))):
        with pytest.raises(ValueError,
                           match=r"SomeEnv-v0.*\['x'\] of the example step are missing"):
            target[0] = Other(timeout=False)
