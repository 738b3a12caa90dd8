"""A run on an env family from a plug-in reopens without ``RLFAST_PLUGINS`` (issue 52).

``rlfast train`` records in ``params.json`` the plug-in modules that registered the run's
env family, algorithm or sampler, with the directory each was imported from; ``rlfast eval``,
``watch``, ``export`` and ``resume`` import them again before rebuilding anything. A module
that cannot be imported (deleted, renamed, or only named by an older run's env id or by its
snapshot) is one line on stderr naming it and ``RLFAST_PLUGINS``, with exit status 2.

The plug-in is ``examples/custom_env_family.py`` copied into a temporary directory as the
module ``reopen_corridor`` (it registers ``corridor:<length>``), so that the module's name
differs from the family's prefix and from any module on the default path.
"""
from __future__ import annotations

import importlib
import json
import os
import pathlib
import shutil
import subprocess
import sys
import textwrap

import pytest
import torch

from rlfast.experiments import catalog
from rlfast.experiments.builtin import ENV_FAMILIES
from rlfast.experiments.run_dir import PluginImportError, RunDirError, load_run_plugins

REPO = pathlib.Path(__file__).resolve().parents[2]
PLUGIN = "reopen_corridor"


def _rlfast(args: list[str], cwd: os.PathLike, plugins: str | None = None,
            path: os.PathLike | None = None) -> subprocess.CompletedProcess:
    """``python -m rlfast ARGS`` with only rlfast on PYTHONPATH (plus ``path``) and
    ``RLFAST_PLUGINS`` unset (or ``plugins``)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(REPO)] + ([str(path)] if path is not None else [])))
    env.pop(catalog.PLUGIN_ENV, None)
    if plugins is not None:
        env[catalog.PLUGIN_ENV] = plugins
    return subprocess.run([sys.executable, "-m", "rlfast", *args], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> dict:
    """A 256-step PPO run on ``corridor:6`` (serial sampler), the plug-in loaded through
    ``RLFAST_PLUGINS`` from a directory on PYTHONPATH; the run's cwd is elsewhere."""
    root = tmp_path_factory.mktemp("plugin_reopen")
    modules, cwd = root / "modules", root / "cwd"
    modules.mkdir()
    cwd.mkdir()
    shutil.copy(REPO / "examples" / "custom_env_family.py", modules / f"{PLUGIN}.py")
    run = root / "run"
    done = _rlfast(["train", "ppo", "corridor:6", "--steps", "256", "--n-envs", "2",
                    "--sampler", "serial", "--no-progress", "--log-dir", str(run),
                    "--set", "runner.log_interval_steps=128"],
                   cwd=cwd, plugins=PLUGIN, path=modules)
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(root=root, modules=modules, cwd=cwd, run=run)


def _copy_run(trained: dict, name: str) -> pathlib.Path:
    copy = trained["root"] / name
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(trained["run"], copy)
    return copy


def _one_line_error(done: subprocess.CompletedProcess, *needles: str) -> str:
    assert done.returncode == 2, (done.returncode, done.stderr[-3000:])
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def test_the_run_records_the_plugin_and_its_directory(trained):
    params = json.loads((trained["run"] / "params.json").read_text())
    assert params["plugins"] == [dict(module=PLUGIN, path=str(trained["modules"]), call=None,
                                      source=catalog.PLUGIN_ENV,
                                      provides=["env family corridor"])]


@pytest.mark.parametrize("command", ["eval", "watch"])
def test_eval_and_watch_reopen_the_run_without_RLFAST_PLUGINS(trained, command):
    extra = ["--video", str(trained["root"] / "corridor.gif")] if command == "watch" else []
    done = _rlfast([command, str(trained["run"]), "--episodes", "2", "--device", "cpu",
                    *extra], cwd=trained["cwd"])
    assert done.returncode == 0, done.stderr[-3000:]
    assert "ppo on corridor:6" in done.stdout
    assert ("Return over 2 episodes" if command == "eval" else "Video: ") in done.stdout


def test_export_reopens_the_run_without_RLFAST_PLUGINS(trained):
    out = trained["root"] / "policy.pt"
    done = _rlfast(["export", str(trained["run"]), "--format", "torchscript", "-o", str(out)],
                   cwd=trained["cwd"])
    assert done.returncode == 0, done.stderr[-3000:]
    assert out.exists()


def test_resume_continues_the_run_without_RLFAST_PLUGINS(trained):
    run = _copy_run(trained, "resumed")
    done = _rlfast(["resume", str(run), "--steps", "384", "--no-progress"], cwd=trained["cwd"])
    assert done.returncode == 0, done.stderr[-3000:]
    assert "after 384 steps" in done.stdout
    params = json.loads((run / "params.json").read_text())
    assert params["plugins"][0]["module"] == PLUGIN  # kept for the next reopening
    assert len(params["resumes"]) == 1


@pytest.mark.parametrize("command", [["eval"], ["resume", "--steps", "384"],
                                     ["export", "--format", "torchscript"]])
def test_a_plugin_that_is_gone_is_one_line_naming_it(trained, command):
    source = trained["modules"] / f"{PLUGIN}.py"
    hidden = trained["modules"] / f"{PLUGIN}.py.hidden"
    source.rename(hidden)
    try:
        done = _rlfast([command[0], str(trained["run"]), *command[1:]], cwd=trained["cwd"])
    finally:
        hidden.rename(source)
    line = _one_line_error(done, f"plug-in module {PLUGIN}", f"RLFAST_PLUGINS={PLUGIN}",
                           "env family corridor", str(trained["modules"]),
                           f"No module named '{PLUGIN}'")
    assert line.startswith("rlfast export: error: " if command[0] == "export"
                           else "rlfast: error: ")


def test_a_run_without_the_record_names_the_module_its_env_id_needs(trained):
    """A run trained before rlfast recorded plug-ins: the env id corridor:6 falls back to
    gymnasium's module:Env ids, whose module 'corridor' does not exist."""
    run = _copy_run(trained, "unrecorded")
    params = json.loads((run / "params.json").read_text())
    del params["plugins"]
    (run / "params.json").write_text(json.dumps(params))
    done = _rlfast(["eval", str(run)], cwd=trained["cwd"])
    _one_line_error(done, "needs the module 'corridor'", "RLFAST_PLUGINS")


def test_a_snapshot_holding_an_object_of_a_missing_module_is_one_line(trained):
    from rlfast.utils.logging.snapshot import load_snapshot

    run = _copy_run(trained, "pickled")
    gone = trained["root"] / "gone_modules"
    gone.mkdir(exist_ok=True)
    (gone / "reopen_gone_thing.py").write_text("class Thing:\n    pass\n")
    sys.path.insert(0, str(gone))
    try:
        thing = importlib.import_module("reopen_gone_thing").Thing()
        snapshot = load_snapshot(run / "params.pkl")
        snapshot["extra"] = thing
        torch.save(snapshot, run / "params.pkl")
    finally:
        sys.path.remove(str(gone))
        sys.modules.pop("reopen_gone_thing", None)
    shutil.rmtree(gone)
    done = _rlfast(["eval", str(run)], cwd=trained["cwd"])
    _one_line_error(done, "needs the module 'reopen_gone_thing'", "RLFAST_PLUGINS",
                    "snapshot holds an object defined in it")


@pytest.fixture
def probe_module(tmp_path):
    """A plug-in module, ``reopen_probe_family``, in a directory that is not on sys.path; it
    registers the env family ``reopenprobe`` when imported. Undone afterwards."""
    name = "reopen_probe_family"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent('''
        import gymnasium
        import rlfast

        def make_probe(name, **kwargs):
            return gymnasium.make("CartPole-v1", **kwargs)

        rlfast.register_env_family("reopenprobe", make_probe, replace=True)
    '''))
    yield name, tmp_path
    sys.modules.pop(name, None)
    while str(tmp_path) in sys.path:
        sys.path.remove(str(tmp_path))
    if "reopenprobe" in ENV_FAMILIES:
        ENV_FAMILIES.remove("reopenprobe")
    catalog._origins.pop(("env family", "reopenprobe"), None)


def test_run_plugins_names_the_registering_module_and_load_run_plugins_imports_it(
        probe_module, tmp_path):
    name, directory = probe_module
    sys.path.append(str(directory))
    importlib.import_module(name)
    records = catalog.run_plugins("ppo", "reopenprobe:x", "serial")
    assert records == [dict(module=name, path=str(directory), call=None, source="import",
                            provides=["env family reopenprobe"])]
    assert catalog.run_plugins("ppo", "CartPole-v1", "serial") == []  # rlfast's own entries
    # Forget it, as a new process would, then reopen from the record alone.
    sys.modules.pop(name)
    sys.path.remove(str(directory))
    ENV_FAMILIES.remove("reopenprobe")
    assert load_run_plugins(dict(plugins=records), tmp_path) == [name]
    assert "reopenprobe" in ENV_FAMILIES
    assert str(directory) in sys.path


def test_a_malformed_plugins_record_is_refused(tmp_path):
    with pytest.raises(RunDirError, match="plugins is 'reopen_corridor'; expected a list"):
        load_run_plugins(dict(plugins="reopen_corridor"), tmp_path)
    with pytest.raises(PluginImportError,
                       match="plug-in module reopen_nowhere_xyz .*RLFAST_PLUGINS=reopen_nowhere"):
        load_run_plugins(dict(plugins=[dict(module="reopen_nowhere_xyz", path=None,
                                            source="RLFAST_PLUGINS")]), tmp_path)
