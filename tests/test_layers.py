"""The layering of ARCHITECTURE.md, read from the code's own imports.

Every ``import`` in ``rlfast/`` counts, at module level or inside a function (a function-level
import that closes a circle is still a circle); only ``if TYPE_CHECKING:`` blocks are left
out. A name imported from a package's ``__init__`` counts as an import of the module that
defines it when the ``__init__`` re-exports it from one of its submodules, so package
re-exports neither hide nor invent a dependency. Three rules:

- no import circle between files anywhere in ``rlfast/``;
- nothing in ``rlfast/`` imports ``rlfast.cli`` (it is argument parsing and dispatch only);
- a lower layer never imports a higher one (the table below, from ARCHITECTURE.md).
"""
from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1] / "rlfast"

# Layer -> the rlfast packages it may import (itself always allowed). From ARCHITECTURE.md's
# "Layers"; experiments and the launcher may use everything below them, and nothing imports
# the command line.
ALLOWED = {
    "utils": set(),
    "spaces": {"utils"},
    "distributions": {"utils"},
    "envs": {"spaces", "utils"},
    "models": {"utils"},
    "agents": {"models", "distributions", "spaces", "utils"},
    "replays": {"utils"},
    "algos": {"agents", "replays", "distributions", "models", "utils"},
    "samplers": {"agents", "envs", "spaces", "utils"},
    "runners": {"samplers", "algos", "agents", "replays", "envs", "spaces", "models",
                "distributions", "utils"},
    "es": {"samplers", "agents", "models", "envs", "spaces", "distributions", "utils"},
    "experiments": {"runners", "es", "samplers", "algos", "replays", "agents", "models",
                    "envs", "spaces", "distributions", "utils", "launching"},
    "launching": {"experiments", "runners", "es", "samplers", "algos", "replays", "agents",
                  "models", "envs", "spaces", "distributions", "utils"},
}


def module_files(root: pathlib.Path = ROOT) -> dict[str, pathlib.Path]:
    """Dotted module name -> file, for every ``.py`` under ``root`` (packages by ``__init__``)."""
    mods = {}
    for path in root.rglob("*.py"):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = path
    return mods


def _imports(tree: ast.AST, module: str, is_package: bool) -> list[tuple[str, str | None]]:
    """(imported module, imported name or None) pairs, outside ``TYPE_CHECKING`` blocks."""
    skip = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.dump(node.test):
            skip.update(id(n) for n in ast.walk(node))
    package = module if is_package else module.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            found.extend((alias.name, None) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[:len(parts) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            found.extend((base, alias.name) for alias in node.names)
    return found


def import_graph(root: pathlib.Path = ROOT) -> dict[str, set[str]]:
    """Module -> the rlfast modules it imports, package re-exports resolved (see above)."""
    mods = module_files(root)
    trees = {m: ast.parse(p.read_text(), str(p)) for m, p in mods.items()}
    packages = {m for m, p in mods.items() if p.name == "__init__.py"}
    raw = {m: _imports(trees[m], m, m in packages) for m in mods}
    # What each package __init__ re-exports: name -> the submodule it came from.
    reexports: dict[str, dict[str, str]] = {}
    for pkg in packages:
        table = {}
        for base, name in raw[pkg]:
            if name and base in mods and base != pkg:
                table[name] = base
        reexports[pkg] = table

    def resolve(base: str, name: str | None) -> str | None:
        if name is not None and f"{base}.{name}" in mods:
            return f"{base}.{name}"  # a submodule
        while base and base not in mods:
            base = base.rpartition(".")[0]
        if not base:
            return None
        seen = set()
        while base in packages and name in reexports[base] and base not in seen:
            seen.add(base)
            base = reexports[base][name]
        return base

    graph = {}
    for m in mods:
        targets = set()
        for base, name in raw[m]:
            if not base.startswith("rlfast"):
                continue
            target = resolve(base, name)
            if target and target != m:
                targets.add(target)
        graph[m] = targets
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []
    counter = 0
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in graph:
                    continue
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def _layer(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def layer_violations(graph: dict[str, set[str]]) -> list[str]:
    """``a -> b`` for every import of a layer that ``a``'s layer may not use."""
    bad = []
    for module, targets in sorted(graph.items()):
        layer = _layer(module)
        if layer not in ALLOWED:
            continue  # the package root, __main__, cli: the top
        for target in sorted(targets):
            other = _layer(target)
            if other is None or other == layer:
                continue
            if other not in ALLOWED.get(layer, set()):
                bad.append(f"{module} ({layer}) -> {target} ({other})")
    return bad


def cli_importers(graph: dict[str, set[str]]) -> list[str]:
    return sorted(m for m, targets in graph.items()
                  if "rlfast.cli" in targets and m != "rlfast.__main__")


@pytest.fixture(scope="module")
def graph():
    g = import_graph()
    assert len(g) > 200, f"only {len(g)} modules found under {ROOT}"
    return g


def test_no_import_circles(graph):
    found = circles(graph)
    assert not found, "import circles:\n  " + "\n  ".join(" <-> ".join(c) for c in found)


def test_nothing_imports_the_command_line(graph):
    assert not cli_importers(graph), f"modules importing rlfast.cli: {cli_importers(graph)}"


def test_lower_layers_never_import_higher_ones(graph):
    bad = layer_violations(graph)
    assert not bad, "layer violations:\n  " + "\n  ".join(bad)


def test_every_layer_of_the_package_is_in_the_table(graph):
    layers = {_layer(m) for m in graph} - {None, "cli", "__main__"}
    assert layers <= set(ALLOWED), f"layers without rules: {sorted(layers - set(ALLOWED))}"


# The checks themselves, on small packages written for the purpose: each must catch what it
# exists to catch, through every route the docstring names.
def _package(tmp_path, files: dict[str, str]) -> pathlib.Path:
    root = tmp_path / "rlfast"
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_a_function_level_import_closes_a_circle(tmp_path):
    root = _package(tmp_path, {
        "__init__.py": "", "utils/__init__.py": "",
        "utils/a.py": "from rlfast.utils.b import x\n",
        "utils/b.py": "x = 1\ndef f():\n    from rlfast.utils import a\n"})
    assert circles(import_graph(root)) == [["rlfast.utils.a", "rlfast.utils.b"]]


def test_a_package_reexport_is_followed_to_its_module(tmp_path):
    root = _package(tmp_path, {
        "__init__.py": "", "runners/__init__.py": "from rlfast.runners.base import Base\n",
        "runners/base.py": "class Base: pass\nfrom rlfast.runners.snap import s\n",
        "runners/snap.py": "def s():\n    from rlfast.runners import Base\n"})
    graph = import_graph(root)
    assert graph["rlfast.runners.snap"] == {"rlfast.runners.base"}
    assert circles(graph) == [["rlfast.runners.base", "rlfast.runners.snap"]]


def test_type_checking_imports_do_not_count(tmp_path):
    root = _package(tmp_path, {
        "__init__.py": "", "utils/__init__.py": "",
        "utils/a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                      "    from rlfast.cli import main\n",
        "cli.py": "from rlfast.utils.a import x\n"})
    assert cli_importers(import_graph(root)) == []


def test_cli_importers_and_upward_imports_are_reported(tmp_path):
    root = _package(tmp_path, {
        "__init__.py": "", "cli.py": "", "utils/__init__.py": "", "agents/__init__.py": "",
        "utils/a.py": "def f():\n    import rlfast.cli\n",
        "agents/b.py": "x = 1\n",
        "utils/c.py": "from rlfast.agents.b import x\n"})
    graph = import_graph(root)
    assert cli_importers(graph) == ["rlfast.utils.a"]
    assert layer_violations(graph) == ["rlfast.utils.a (utils) -> rlfast.cli (cli)",
                                       "rlfast.utils.c (utils) -> rlfast.agents.b (agents)"]
