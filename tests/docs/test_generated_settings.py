"""The docs site's ``--set`` key tables (scripts/docs/gen_settings.py): the files in docs/ are
what the script writes now, and what they say agrees with what ``rlfast train`` resolves,
checked here through the command line's own parser and ``train_config``."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from rlfast.cli import _parser
from rlfast.experiments.assembly import train_config
from rlfast.experiments.config import convert_value, flatten
from rlfast.experiments.env_overrides import ENV_TUNED

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
SCRIPT = ROOT / "scripts" / "docs" / "gen_settings.py"


@pytest.fixture(scope="module")
def gen():
    spec = importlib.util.spec_from_file_location("gen_settings_under_test", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(spec.name, None)


@pytest.fixture(scope="module")
def generated(gen):
    return gen.generate()


def train(algo: str, env: str, *argv: str) -> dict:
    """The flat configuration ``rlfast train ALGO ENV ARGV`` runs with."""
    return flatten(train_config(_parser().parse_args(["train", algo, env, *argv])))


def tables(text: str) -> list[tuple[list[str], dict[str, list[str]]]]:
    """Each markdown table of ``text``: its header cells and ``{first cell: other cells}``."""
    found, lines = [], text.splitlines()
    i = 0
    while i < len(lines):
        if lines[i].startswith("|") and i + 1 < len(lines) and lines[i + 1].startswith("|---"):
            header = [c.strip() for c in lines[i].strip("|").split(" | ")]
            rows: dict[str, list[str]] = {}
            i += 2
            while i < len(lines) and lines[i].startswith("|"):
                cells = [c.strip() for c in lines[i].strip().strip("|").split(" | ")]
                rows.setdefault(cells[0], cells[1:])
                i += 1
            found.append((header, rows))
        else:
            i += 1
    return found


def column(text: str, family: str) -> dict[str, str]:
    """``{key: cell text}`` of the ``family`` column of a fragment's settings table, without
    code marks; absent keys left out."""
    header, rows = tables(text)[0]
    index = next(i for i, h in enumerate(header[1:]) if h.startswith(family + "<br>"))
    return {key.strip("`"): cells[index].strip("`") for key, cells in rows.items()
            if cells[index] != "&mdash;"}


def test_generated_files_are_current(gen, generated):
    stale = gen.stale(generated, DOCS)
    assert not stale, ("stale docs tables; run `python scripts/docs/gen_settings.py`: "
                       + ", ".join(stale))


def test_every_promised_algorithm_has_a_fragment_in_the_index():
    # The ALGO names of the command line that shared/API.md promises.
    names = ["a2c", "ppo", "dqn", "cat_dqn", "rainbow", "r2d1", "ddpg", "td3", "sac", "cem",
             "cmaes", "openai_es", "mappo"]
    index = (DOCS / "reference" / "settings" / "index.md").read_text(encoding="utf-8")
    for name in names:
        assert (DOCS / "generated" / "settings" / f"{name}.md").is_file(), name
        assert f'--8<-- "generated/settings/{name}.md"' in index, name


def test_ppo_cartpole_learning_rate_is_what_train_uses():
    text = (DOCS / "generated" / "settings" / "ppo.md").read_text(encoding="utf-8")
    assert ("ppo", "CartPole-v1") not in ENV_TUNED  # else the column is not what train uses
    shown = column(text, "discrete")["algo.learning_rate"]
    assert float(shown) == train("ppo", "CartPole-v1")["algo.learning_rate"]


def test_a_column_is_every_key_train_resolves():
    """The ddpg column lists exactly the keys and defaults of ``rlfast train ddpg`` on an
    environment without a per-environment entry, each shown as ``--set`` takes it back."""
    text = (DOCS / "generated" / "settings" / "ddpg.md").read_text(encoding="utf-8")
    env = "MountainCarContinuous-v0"
    assert ("ddpg", env) not in ENV_TUNED  # else pick another environment
    shown = column(text, "continuous")
    resolved = train("ddpg", env)
    assert set(shown) == set(resolved)
    for key, default in resolved.items():
        assert convert_value(shown[key], default, key) == default, key


def test_column_and_per_environment_entries_give_train_config():
    """dqn on CartPole-v1: the discrete column with the CartPole-v1 rows of the
    per-environment table applied is what ``rlfast train dqn CartPole-v1`` runs with."""
    text = (DOCS / "generated" / "settings" / "dqn.md").read_text(encoding="utf-8")
    resolved = train("dqn", "CartPole-v1")
    values = column(text, "discrete")
    header, _ = tables(text)[1]
    assert header == ["Environment", "Key", "Value"]
    per_env = [line for line in text.splitlines() if line.startswith("| `CartPole-v1` |")]
    assert per_env, "no CartPole-v1 rows in dqn's per-environment table"
    for line in per_env:
        _, key, value = (c.strip().strip("`") for c in line.strip().strip("|").split(" | "))
        values[key] = value
    assert set(values) == set(resolved)
    for key, default in resolved.items():
        assert convert_value(values[key], default, key) == default, key
    assert resolved["algo.n_step_return"] == 10  # the CartPole-v1 entry, not the column's 1


def test_stale_names_changed_missing_and_extra_files(gen, tmp_path):
    files = {gen.FRAGMENTS / "a.md": "A\n", gen.FRAGMENTS / "b.md": "B\n", gen.INDEX: "I\n"}
    gen.write(files, tmp_path)
    assert gen.stale(files, tmp_path) == []
    (tmp_path / gen.FRAGMENTS / "a.md").write_text("edited\n", encoding="utf-8")
    (tmp_path / gen.INDEX).unlink()
    (tmp_path / gen.FRAGMENTS / "gone.md").write_text("old\n", encoding="utf-8")
    assert gen.stale(files, tmp_path) == [
        "generated/settings/a.md", "reference/settings/index.md",
        "generated/settings/gone.md (no longer generated)"]
    gen.write(files, tmp_path)
    assert gen.stale(files, tmp_path) == []
    assert not (tmp_path / gen.FRAGMENTS / "gone.md").exists()
