"""Package-level checks: exported names, the layer rule, documented buffer methods."""
import ast
import inspect
import pathlib

import pytest

import rlfast.replays as replays

DQN_NAMES = ["SumTree", "UniformReplayBuffer", "PrioritizedReplayBuffer",
             "UniformReplayFrameBuffer", "PrioritizedReplayFrameBuffer",
             "UniformSequenceReplayBuffer", "PrioritizedSequenceReplayBuffer",
             "UniformSequenceReplayFrameBuffer", "PrioritizedSequenceReplayFrameBuffer"]


@pytest.mark.parametrize("name", DQN_NAMES)
def test_documented_names_are_exported(name):
    assert name in replays.__all__ and getattr(replays, name) is not None


def test_every_exported_name_exists_and_dead_helpers_are_gone():
    for name in replays.__all__:
        assert getattr(replays, name) is not None, name
    assert "make_replay_buffer" in replays.__all__
    assert not hasattr(replays, "beta_schedule")


def test_replays_import_only_utils_and_themselves():
    root = pathlib.Path(replays.__file__).parent
    for path in root.glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                modules = [node.module]
            elif isinstance(node, ast.Import):
                modules = [a.name for a in node.names]
            else:
                continue
            for m in modules:
                if m.startswith("rlfast"):
                    assert m.startswith(("rlfast.utils", "rlfast.replays")), (path.name, m)
        assert len(path.read_text().splitlines()) < 400, path.name


def test_agent_inputs_fields_match_agents():
    assert replays.AgentInputs._fields == ("observation", "prev_action", "prev_reward")
    assert replays.SamplesFromReplay._fields == (
        "agent_inputs", "action", "return_", "done", "done_n", "target_inputs")
    assert replays.SamplesFromReplayPri._fields[-1] == "is_weights"
    assert replays.SequenceSamplesFromReplay._fields == (
        "agent_inputs", "action", "return_", "done", "done_n", "init_rnn_state")



def test_public_buffer_methods_have_docstrings_and_hints():
    for name in replays.__all__:
        cls = getattr(replays, name)
        if not (inspect.isclass(cls) and hasattr(cls, "sample_batch")):
            continue
        for attr in ("append_samples", "sample_idxs", "sample_batch", "extract_batch",
                     "update_batch_priorities", "set_beta"):
            method = getattr(cls, attr)
            assert method.__doc__, (name, attr)
            assert inspect.signature(method).return_annotation is not inspect.Signature.empty
