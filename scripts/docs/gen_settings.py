"""Write the ``--set`` key tables of the docs site from the presets ``rlfast train`` uses.

    python scripts/docs/gen_settings.py          # (re)write the files
    python scripts/docs/gen_settings.py --check  # exit 1 naming stale files; write nothing

For every algorithm and evolution strategy that rlfast registers itself, it writes
``docs/generated/settings/<name>.md``, a markdown fragment (no heading) that the algorithm
pages and ``docs/reference/settings/index.md`` include with pymdownx.snippets
(``--8<-- "generated/settings/ppo.md"``). It also writes that index page.

A fragment holds:

- the preset families of the algorithm and which environment ids take each;
- one table of every ``--set`` key with its default in each preset family. A column is
  ``flatten(get_preset(ALGO, ENV))`` (``get_es_preset`` for an evolution strategy): the
  function ``rlfast train ALGO ENV`` itself resolves its configuration with, called for one
  representative environment of the family (:data:`REPRESENTATIVE_ENVS`, named in the
  column's heading), with the per-environment table ``ENV_TUNED`` set aside for the call;
- a second table with those per-environment entries, where the algorithm has any.

The representative environments are made once to read their spaces (``get_preset`` does
that); none is stepped. Their optional packages (``rlfast[test]`` installs them all) must be
importable. ``env.kwargs.*`` of a PettingZoo environment (its constructor's own arguments)
appear as one row, so that a new release of the package does not change the table.
"""
from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any
from unittest import mock

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
FRAGMENTS = Path("generated") / "settings"  # under docs/
INDEX = Path("reference") / "settings" / "index.md"  # under docs/

# One environment id per preset family: the column of that family is resolved for it.
REPRESENTATIVE_ENVS = {
    "discrete": "CartPole-v1",
    "continuous": "Pendulum-v1",
    "atari": "atari:pong",
    "minatar": "minatar:breakout",
    "popgym": "popgym:RepeatPreviousEasy",
    "multiagent": "pz:mpe2.simple_spread_v3",
}
ES_REPRESENTATIVE_ENVS = {"discrete": "CartPole-v1", "continuous": "Pendulum-v1"}

# Which environment ids take each preset family (rlfast.experiments.presets.preset_family
# and the env families' own preset_family).
FAMILY_SCOPE = {
    "discrete": "gymnasium ids with a `Discrete` action space (and, for the algorithms that "
                "act in them, `MultiDiscrete` / `MultiBinary` ones)",
    "continuous": "gymnasium ids with a 1-D `Box` action space, and POPGym's continuous "
                  "tasks",
    "atari": "`atari:<game>`, and PettingZoo's two-player Atari games "
             "(`pz:pettingzoo.atari.<game>`)",
    "minatar": "`minatar:<game>`",
    "popgym": "`popgym:<Task>` with a `Discrete` action space",
    "multiagent": "`pz:<module>`, PettingZoo parallel environments with vector observations",
}
ES_FAMILY_SCOPE = {"discrete": "gymnasium ids with a `Discrete` action space",
                   "continuous": "gymnasium ids with a 1-D `Box` action space"}

TITLES = {"ppo": "PPO", "a2c": "A2C", "mappo": "MAPPO", "dqn": "DQN",
          "cat_dqn": "Categorical DQN, C51", "rainbow": "Rainbow", "r2d1": "R2D1",
          "ddpg": "DDPG", "td3": "TD3", "sac": "SAC", "cem": "CEM", "cmaes": "CMA-ES",
          "openai_es": "OpenAI-ES"}

# Sections in the order the tables list them; a section not named here comes after these.
SECTION_ORDER = ("agent", "algo", "strategy", "policy", "evaluator", "env", "sampler",
                 "runner", "affinity", "async", "distributed")
COLLAPSED = ("env.kwargs.",)  # keys whose rows collapse into one: they come from a package
ABSENT = "&mdash;"


# ---- resolving the configurations -----------------------------------------------------------
@contextlib.contextmanager
def general_presets() -> Iterator[None]:
    """While open, ``get_preset`` and ``get_es_preset`` leave out their per-environment
    entries (``ENV_TUNED``, ``ES_ENV_TUNED``), which :func:`env_tuned` lists instead."""
    from rlfast.experiments.env_overrides import ENV_TUNED
    from rlfast.experiments.es_presets import ES_ENV_TUNED
    with mock.patch.dict(ENV_TUNED, clear=True), mock.patch.dict(ES_ENV_TUNED, clear=True):
        yield


def own_names(names: list[str]) -> list[str]:
    """The ``names`` rlfast registers itself: a plug-in's (or a test's) are left out."""
    from rlfast.experiments import catalog
    env = REPRESENTATIVE_ENVS["discrete"]
    return [name for name in names if not catalog.run_plugins(name, env)]


def family_env(family: str, table: Mapping[str, str], what: str) -> str:
    try:
        return table[family]
    except KeyError:
        raise SystemExit(f"gen_settings: no representative environment for the preset family "
                         f"{family!r} of {what}; add one to REPRESENTATIVE_ENVS") from None


def algorithm_columns(algo: str) -> list[tuple[str, str, dict]]:
    """``(family, env id, flat config)`` for each preset family of ``algo``."""
    from rlfast.experiments import catalog
    from rlfast.experiments.config import flatten
    from rlfast.experiments.presets import check_algo_fits, get_preset, inspect_env
    columns = []
    for family in catalog.algorithm(algo).presets:
        env = family_env(family, REPRESENTATIVE_ENVS, algo)
        resolved = check_algo_fits(algo, inspect_env(env), env)
        if resolved != family:
            raise SystemExit(f"gen_settings: {env} takes {algo}'s {resolved!r} preset, not "
                             f"{family!r}; fix REPRESENTATIVE_ENVS")
        with general_presets():
            columns.append((family, env, flatten(get_preset(algo, env))))
    return columns


def es_columns(algo: str) -> list[tuple[str, str, dict]]:
    """``(family, env id, flat config)`` for each preset family of an evolution strategy."""
    from rlfast.experiments import catalog
    from rlfast.experiments.config import flatten
    from rlfast.experiments.presets import get_es_preset
    columns = []
    for family in catalog.es_strategy(algo).presets:
        env = family_env(family, ES_REPRESENTATIVE_ENVS, algo)
        with general_presets():
            columns.append((family, env, flatten(get_es_preset(algo, env))))
    return columns


def env_tuned(algo: str, es: bool) -> list[tuple[str, str, Any]]:
    """``(env id, key, value)`` of every per-environment entry of ``algo``."""
    from rlfast.experiments.config import flatten
    if es:
        from rlfast.experiments.es_presets import ES_ENV_TUNED as table
    else:
        from rlfast.experiments.env_overrides import ENV_TUNED as table
    rows = []
    for (name, env), changes in table.items():
        if name == algo:
            rows.extend((env, key, value) for key, value in flatten(changes).items())
    return rows


# ---- rendering ------------------------------------------------------------------------------
def show(value: Any) -> str:
    """A default as it reads on the command line (strings unquoted), in code."""
    text = value if isinstance(value, str) else repr(value)
    return "`" + text.replace("|", "\\|") + "`"


def collapse(key: str) -> str:
    for prefix in COLLAPSED:
        if key.startswith(prefix):
            return prefix + "NAME"
    return key


def ordered_keys(columns: list[tuple[str, str, dict]]) -> list[str]:
    """Every key of the columns (collapsed), sections in :data:`SECTION_ORDER`, and within a
    section grouped by their dotted parents, each group where its first key was met."""
    tree: dict = {}
    for _, _, flat in columns:
        for key in flat:
            node = tree
            for part in collapse(key).split("."):
                node = node.setdefault(part, {})

    def walk(node: dict, prefix: str) -> Iterator[str]:
        for part, children in node.items():
            yield from walk(children, f"{prefix}{part}.") if children else [prefix + part]

    def rank(section: str) -> int:
        return SECTION_ORDER.index(section) if section in SECTION_ORDER else len(SECTION_ORDER)

    sections = sorted(tree, key=rank)  # stable: unnamed sections keep their order
    return [key for section in sections for key in walk({section: tree[section]}, "")]


def cell(flat: dict, key: str) -> str:
    """The default of ``key`` in one column; a collapsed row says where its values come from."""
    if key in flat:
        return show(flat[key])
    prefix = key[:-len("NAME")]
    if key.endswith("NAME") and prefix in COLLAPSED and any(k.startswith(prefix) for k in flat):
        return "the environment's own defaults"
    return ABSENT


def settings_table(columns: list[tuple[str, str, dict]]) -> list[str]:
    head = "| Key | " + " | ".join(f"{family}<br>(`{env}`)" for family, env, _ in columns) + " |"
    lines = [head, "|" + "---|" * (len(columns) + 1)]
    for key in ordered_keys(columns):
        lines.append(f"| `{key}` | " + " | ".join(cell(flat, key) for _, _, flat in columns)
                     + " |")
    return lines


def fragment(algo: str, es: bool = False) -> str:
    """The markdown fragment of ``algo`` (an evolution strategy with ``es``)."""
    columns = es_columns(algo) if es else algorithm_columns(algo)
    scopes = ES_FAMILY_SCOPE if es else FAMILY_SCOPE
    command = f"rlfast train {algo} ENV"
    lines = [f"`{command}` starts from the preset of the family that ENV belongs to:", ""]
    lines += [f"- `{family}`: {scopes.get(family, 'the environments of that family')}."
              for family, _, _ in columns]
    lines += ["", f"Every key below can be changed with `--set KEY=VALUE` or a `--config` file. "
              f"A column gives the defaults `{command}` resolves for the environment named "
              f"under the family, before any per-environment entry. {ABSENT}: the family's "
              f"configuration has no such key (`--set` refuses it).", ""]
    for prefix in COLLAPSED:
        for _, env, flat in columns:
            names = [k[len(prefix):] for k in flat if k.startswith(prefix)]
            if names:
                example = ", ".join(f"`{n}`" for n in names[:3])
                lines += [f"`{prefix}NAME`: one key per keyword argument of the environment's "
                          f"constructor, at its default (for `{env}`: {example}, ...).", ""]
                break
    lines += settings_table(columns)
    tuned = env_tuned(algo, es)
    if tuned:
        lines += ["", f"Per-environment entries: `{command}` with one of these ids applies "
                  f"the values below on top of its family's preset (then `--set` applies).", "",
                  "| Environment | Key | Value |", "|---|---|---|"]
        lines += [f"| `{env}` | `{key}` | {show(value)} |" for env, key, value in tuned]
    return "\n".join(lines) + "\n"


INTRO = """\
# Settings (`--set` keys)

<!-- Written by scripts/docs/gen_settings.py; edit that script, not this page. -->

Every run starts from a preset: `rlfast train ALGO ENV` picks the preset of ALGO for the
family ENV belongs to. Any leaf of the preset can then be changed by its dotted key:

- `--set KEY=VALUE`, repeatable: the value is converted to the type of the default
  (`--set algo.learning_rate=3e-4`, `--set agent.model_kwargs.hidden_sizes=[128,128]`,
  `--set runner.stop_return=475`);
- `--config FILE`: a JSON object, nested like a preset or keyed by dotted keys; values
  keep their JSON types.

The named options come first (`--steps` is `runner.n_steps`, `--n-envs` is
`sampler.batch_B`), then `--config`, then `--set`; the later one wins. A key that is not in
the configuration is an error naming the closest valid keys. The resolved configuration is
written to the run's `params.json`.

The tables below are generated from the presets that `rlfast train` uses (the script
`scripts/docs/gen_settings.py`; a test fails when they are stale). Two settings depend on the
environment itself: `sampler.eval_max_steps` is raised so that every evaluation environment
can finish one episode of the environment's time limit, and `env.flatten_observation=True`
is added for `Dict`, `Tuple`, `Discrete`, `MultiDiscrete` and `MultiBinary` observation
spaces (so it shows only in the columns whose named environment has one).
"""


def index_page(algos: list[str], strategies: list[str]) -> str:
    lines = [INTRO]
    for name in algos:
        lines += [f"## {TITLES.get(name, name)} (`{name}`)", "",
                  f'--8<-- "{(FRAGMENTS / name).as_posix()}.md"', ""]
    lines += ["## Evolution strategies", "",
              "`rlfast train` runs an evolution strategy when ALGO names one; its presets have "
              "the sections `strategy`, `policy`, `evaluator`, `env` and `runner`.", ""]
    for name in strategies:
        lines += [f"### {TITLES.get(name, name)} (`{name}`)", "",
                  f'--8<-- "{(FRAGMENTS / name).as_posix()}.md"', ""]
    return "\n".join(lines).rstrip("\n") + "\n"


def generate() -> dict[Path, str]:
    """``{path under docs/: text}`` of every generated file."""
    from rlfast.experiments import catalog
    algos = own_names(catalog.algorithm_names())
    strategies = own_names(catalog.es_strategy_names())
    files = {FRAGMENTS / f"{name}.md": fragment(name) for name in algos}
    files.update({FRAGMENTS / f"{name}.md": fragment(name, es=True) for name in strategies})
    files[INDEX] = index_page(algos, strategies)
    return files


def stale(files: dict[Path, str], docs: Path = DOCS) -> list[str]:
    """The generated files under ``docs`` that differ from ``files`` or are missing, and the
    fragments there that are no longer generated."""
    out = []
    for path, text in files.items():
        target = docs / path
        if not target.is_file() or target.read_text(encoding="utf-8") != text:
            out.append(path.as_posix())
    fragments = docs / FRAGMENTS
    if fragments.is_dir():
        for extra in sorted(fragments.glob("*.md")):
            if extra.relative_to(docs) not in files:
                out.append(f"{extra.relative_to(docs).as_posix()} (no longer generated)")
    return out


def write(files: dict[Path, str], docs: Path = DOCS) -> None:
    for path, text in files.items():
        target = docs / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    for extra in (docs / FRAGMENTS).glob("*.md"):
        if extra.relative_to(docs) not in files:
            extra.unlink()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="exit 1 naming the stale files, without writing")
    args = parser.parse_args(argv)
    files = generate()
    if args.check:
        out = stale(files)
        if out:
            print("stale generated docs (run python scripts/docs/gen_settings.py):",
                  *out, sep="\n  ")
            return 1
        print(f"{len(files)} generated docs files are up to date")
        return 0
    write(files)
    print(f"wrote {len(files)} files under {DOCS.relative_to(ROOT)}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
