"""Package-level checks: exported names, the layer rule, the beta schedule helper."""
import ast
import pathlib

import pytest

import rlfast.replays as replays
from rlfast.replays import beta_schedule

DQN_NAMES = ["SumTree", "UniformReplayBuffer", "PrioritizedReplayBuffer",
             "UniformReplayFrameBuffer", "PrioritizedReplayFrameBuffer",
             "UniformSequenceReplayBuffer", "PrioritizedSequenceReplayBuffer",
             "UniformSequenceReplayFrameBuffer", "PrioritizedSequenceReplayFrameBuffer"]


@pytest.mark.parametrize("name", DQN_NAMES)
def test_documented_names_are_exported(name):
    assert name in replays.__all__ and getattr(replays, name) is not None


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


def test_beta_schedule():
    assert beta_schedule(0, 0.4, 1.0, 100) == pytest.approx(0.4)
    assert beta_schedule(50, 0.4, 1.0, 100) == pytest.approx(0.7)
    assert beta_schedule(100, 0.4, 1.0, 100) == pytest.approx(1.0)
    assert beta_schedule(10**6, 0.4, 1.0, 100) == pytest.approx(1.0)
    assert beta_schedule(5, 0.4, 0.9, 0) == pytest.approx(0.9)
