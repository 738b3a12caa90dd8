"""Every name that API.md promises in its [core], [atari], [dqn], [qpg], [launch], [async],
[multi], [marl], [es] and [face] groups imports from its documented module (the [marl] and
[es] names whose extras are missing are skipped: PettingZoo, cma)."""
import importlib
import importlib.util

import pytest

CORE = {
    "rlfast.utils.collections": "namedarraytuple namedarraytuple_like is_namedtuple "
                                "is_namedarraytuple is_namedtuple_class "
                                "is_namedarraytuple_class NamedTupleSchema "
                                "NamedArrayTupleSchema NamedTuple NamedArrayTuple "
                                "NamedArrayTupleSchema_like AttrDict",
    "rlfast.utils.buffer": "buffer_from_example build_array np_mp_array torchify_buffer "
                           "numpify_buffer buffer_to buffer_method buffer_func get_leading_dims",
    "rlfast.utils.tensor": "infer_leading_dims restore_leading_dims select_at_indexes to_onehot "
                           "from_onehot valid_mean",
    "rlfast.utils.array": "select_at_indexes to_onehot valid_mean infer_leading_dims",
    "rlfast.utils.misc": "iterate_mb_idxs extract_sequences zeros empty",
    "rlfast.utils.seed": "set_seed make_seed",
    "rlfast.utils.synchronize": "RWLock drain_queue find_port",
    "rlfast.utils.prog_bar": "ProgBarCounter",
    "rlfast.utils.logging": "logger logger_context load_snapshot SnapshotCorruptError",
    "rlfast.spaces": "IntBox FloatBox Composite GymSpaceWrapper",
    "rlfast.envs": "Env EnvStep EnvSpaces GymEnvWrapper EnvInfoWrapper make",
    "rlfast.distributions": "Categorical Gaussian DistInfo DistInfoStd MultiCategorical",
    "rlfast.models": "MlpModel Conv2dModel Conv2dHeadModel",
    "rlfast.models.utils": "conv2d_output_shape ScaleGrad update_state_dict strip_ddp_state_dict",
    "rlfast.models.pg": "MujocoFfModel MujocoLstmModel CategoricalPgFfModel CategoricalPgLstmModel",
    "rlfast.agents": "AgentStep AgentInputs BaseAgent RandomAgent RecurrentAgentMixin "
                     "AlternatingRecurrentAgentMixin CategoricalPgAgent "
                     "RecurrentCategoricalPgAgent GaussianPgAgent RecurrentGaussianPgAgent "
                     "AlternatingRecurrentGaussianPgAgent "
                     "MujocoFfAgent MujocoLstmAgent MultiCategoricalPgAgent "
                     "RecurrentMultiCategoricalPgAgent AlternatingRecurrentMultiCategoricalPgAgent",
    "rlfast.algos": "RLAlgorithm PolicyGradientAlgo A2C PPO",
    "rlfast.algos.utils": "discount_return generalized_advantage_estimation discount_return_n_step "
                          "valid_from_done discount_return_tl generalized_advantage_estimation_tl",
    "rlfast.samplers": "BatchSpec TrajInfo SerialSampler CpuSampler CpuResetCollector "
                       "CpuWaitResetCollector CpuEvalCollector SerialEvalCollector",
    "rlfast.runners": "MinibatchRl MinibatchRlEval",
}


ATARI = {
    "rlfast.envs": "AtariEnv AtariTrajInfo",
    "rlfast.models.pg": "AtariFfModel AtariLstmModel",
    "rlfast.agents": "AtariFfAgent AtariLstmAgent",
    "rlfast.samplers": "GpuSampler AlternatingSampler NoOverlapAlternatingSampler "
                       "GpuResetCollector GpuWaitResetCollector GpuEvalCollector",
}
DQN = {
    "rlfast.distributions": "EpsilonGreedy CategoricalEpsilonGreedy",
    "rlfast.models.dqn": "AtariDqnModel AtariCatDqnModel AtariR2d1Model DuelingHeadModel "
                         "DistributionalHeadModel DqnMlpModel CatDqnMlpModel R2d1MlpModel",
    "rlfast.agents": "EpsilonGreedyAgentMixin DqnAgent CatDqnAgent R2d1Agent AtariDqnAgent "
                     "AtariCatDqnAgent AtariR2d1Agent",
    "rlfast.algos": "DQN CategoricalDQN",
    "rlfast.replays": "SumTree UniformReplayBuffer PrioritizedReplayBuffer "
                      "UniformReplayFrameBuffer PrioritizedReplayFrameBuffer "
                      "UniformSequenceReplayBuffer "
                      "PrioritizedSequenceReplayBuffer UniformSequenceReplayFrameBuffer "
                      "PrioritizedSequenceReplayFrameBuffer",
}
QPG = {
    "rlfast.models.qpg": "MuMlpModel QofMuMlpModel PiMlpModel",
    "rlfast.agents": "DdpgAgent Td3Agent SacAgent",
    "rlfast.algos": "DDPG TD3 SAC",
    "rlfast.replays": "TlUniformReplayBuffer TlPrioritizedReplayBuffer",
}
LAUNCH = {
    "rlfast.launching": "encode_affinity make_affinity affinity_from_code get_n_run_slots "
                        "prepend_run_slot validate_affinity VariantLevel make_variants "
                        "make_random_variants update_config load_variant save_variant "
                        "run_experiments launch_experiment report_sweep",
}

ASYNC = {
    "rlfast.replays": "AsyncSumTree AsyncUniformReplayBuffer AsyncPrioritizedReplayBuffer "
                      "AsyncUniformReplayFrameBuffer AsyncPrioritizedReplayFrameBuffer "
                      "AsyncUniformSequenceReplayBuffer AsyncPrioritizedSequenceReplayBuffer "
                      "AsyncUniformSequenceReplayFrameBuffer "
                      "AsyncPrioritizedSequenceReplayFrameBuffer "
                      "AsyncTlUniformReplayBuffer AsyncTlPrioritizedReplayBuffer",
    "rlfast.samplers": "AsyncSerialSampler AsyncCpuSampler AsyncGpuSampler "
                       "AsyncAlternatingSampler",
    "rlfast.runners": "AsyncRl AsyncRlEval",
}
MULTI = {"rlfast.runners": "SyncRl SyncRlEval"}
MARL = {"rlfast.envs": "MultiAgentEnv MultiAgentInfo", "rlfast.agents": "MultiAgentPgAgent"}
ES = {"rlfast.es": "BaseES CEM OpenAIES", "rlfast.launching": "make_random_variants"}
FACE = {"rlfast": "register_algorithm register_sampler register_env_family "
                  "register_es_strategy"}


@pytest.mark.parametrize("module,name", [(m, n) for group in (CORE, ATARI, DQN, QPG, LAUNCH,
                                                              ASYNC, MULTI, MARL, ES, FACE)
                                         for m, names in group.items() for n in names.split()])
def test_core_name_imports(module, name):
    assert getattr(importlib.import_module(module), name) is not None


def test_extras_names_import_where_their_extra_is_installed():
    """``PettingZooEnv`` (PettingZoo) and ``CMAES`` (cma) load on first use."""
    if importlib.util.find_spec("pettingzoo") is not None:
        assert importlib.import_module("rlfast.envs").PettingZooEnv is not None
    if importlib.util.find_spec("cma") is not None:
        assert importlib.import_module("rlfast.es").CMAES is not None


def test_multi_agent_info_is_the_env_info_of_a_multi_agent_step():
    from rlfast.envs import MultiAgentInfo
    assert MultiAgentInfo._fields == ("valid", "timeout")


def test_es_strategies_have_the_promised_interface():
    from rlfast.es import BaseES
    assert callable(BaseES.ask) and callable(BaseES.tell) and hasattr(BaseES, "result")


def test_logger_module_functions():
    from rlfast.utils.logging import logger
    for fn in ("log", "record_tabular", "dump_tabular", "save_itr_params", "load_snapshot"):
        assert callable(getattr(logger, fn))


def test_agent_namedarraytuples_have_documented_fields():
    from rlfast.agents import AgentInputs, AgentStep
    assert AgentStep._fields == ("action", "agent_info")
    assert AgentInputs._fields == ("observation", "prev_action", "prev_reward")


@pytest.mark.parametrize("algo", ["ddpg", "td3", "sac"])
def test_qpg_cli_presets_exist(algo):
    from rlfast.experiments.catalog import algorithm
    from rlfast.experiments.presets import get_preset
    assert algorithm(algo).name == algo
    assert get_preset(algo, "Pendulum-v1")
