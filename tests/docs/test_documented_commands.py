"""Every shell command that the README and the docs pages show runs, on a short budget, or
its block is marked ``<!-- not run: REASON -->`` with a reason (issue 56).

The conventions, what each command is run as, the budget and the run-directory placeholders
are described in tests/docs/_commands.py. Here:

- the harness on small Markdown pages written into ``tmp_path``: blocks, commands, markers,
  commands hidden outside ```bash blocks, and the short-budget plans;
- the real pages: their not-run markers, commands outside ```bash blocks, and one case per
  documented command, named ``PAGE:LINE``. A marked command is a skip that gives the
  marker's reason (``pytest -rs`` lists them); a command whose optional extra is missing is a
  skip that names the extra.

A process module (tests/_parallel.py): ``rlfast`` commands run in this process through
``rlfast.cli.main`` (their samplers may start worker processes), others as subprocesses in
sessions of their own; each case checks that it left no process and no ``/dev/shm`` entry.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

from rlfast.cli import main
from tests._leaks import new_shm_entries, shm_entries
from tests._tiny_run import train_tiny_run
from tests.docs._commands import (ROOT, CannotRun, Part, Workspace, block_commands,
                                  documented_commands, doc_pages, hidden_command_problems,
                                  is_placeholder, logical_lines, marker_problems, parse_line,
                                  plan, read_page, split_page, strip_comment)
from tests.integration._guards import live_children, session_pids

TIMEOUT_S = 600  # one command; each takes seconds of CPU, but minutes on a loaded machine
# No window, no network, one thread: watch draws into SDL's dummy driver, plot into a file,
# --wandb logs offline.
QUIET_ENV = {"MPLBACKEND": "Agg", "SDL_VIDEODRIVER": "dummy", "SDL_AUDIODRIVER": "dummy",
             "WANDB_MODE": "offline", "WANDB_SILENT": "true"}
COMMANDS = documented_commands()


# --- The harness, on pages written here -----------------------------------------------------


PAGE = """\
# A page

```bash
rlfast train ppo CartPole-v1   # a comment
# a comment line
rlfast train ppo CartPole-v1 --set algo.learning_rate=3e-4 \\
    --set 'sampler.batch_T=32' --log-dir data/a

PYTHONPATH=examples RLFAST_PLUGINS=x rlfast train ppo corridor:12 && rlfast eval data/a
```

<!-- not run: needs a GPU -->
```bash
rlfast train ppo atari:pong --device cuda
```

!!! note
    In an admonition:

    ```bash
    rlfast plot "data/x y" --title '#1'
    ```

````text
```bash
not a block of the page
```
````
"""


def test_blocks_are_found_with_their_lines_languages_and_markers():
    page = split_page(PAGE, "docs/a.md")
    assert [(b.line, b.lang) for b in page.blocks] == [(3, "bash"), (13, "bash"), (20, "bash"),
                                                       (24, "text")]
    commands = [c for b in page.blocks if b.lang == "bash" for c in block_commands(b)]
    assert [(c.id, c.not_run) for c in commands] == [
        ("docs/a.md:4", None), ("docs/a.md:6", None), ("docs/a.md:9", None),
        ("docs/a.md:14", "needs a GPU"), ("docs/a.md:21", None)]
    assert commands[0].parts == (Part((), ("rlfast", "train", "ppo", "CartPole-v1")),)
    assert commands[1].parts[0].argv[-4:] == ("--set", "sampler.batch_T=32", "--log-dir",
                                              "data/a")
    assert commands[2].parts == (
        Part((("PYTHONPATH", "examples"), ("RLFAST_PLUGINS", "x")),
             ("rlfast", "train", "ppo", "corridor:12")),
        Part((), ("rlfast", "eval", "data/a")))
    assert commands[4].parts[0].argv == ("rlfast", "plot", "data/x y", "--title", "#1")
    assert "not a block" in page.blocks[3].body[1][1]  # inside the longer fence


def test_continuations_comments_and_what_cannot_be_read():
    block = split_page("```bash\nrlfast train \\\n  ppo \\\n  CartPole-v1\n\n# c\n```\n",
                       "p.md").blocks[0]
    assert logical_lines(block) == [(2, "rlfast train ppo CartPole-v1")]
    assert strip_comment("a 'b # c' d # e") == "a 'b # c' d"
    assert strip_comment("a url#anchor") == "a url#anchor"
    assert parse_line("rlfast eval <run dir> --episodes 3")[0].argv == (
        "rlfast", "eval", "<run dir>", "--episodes", "3")
    assert len(parse_line("cd x; rlfast plot y")) == 2
    for text, why in [("rlfast eval x | tail", "operator '|'"),
                      ("rlfast eval x > out.txt", "operator '>'"),
                      ("rlfast eval $RUN", "shell expansion"),
                      ("rlfast eval 'x", "quotation"), ("A=1", "empty command")]:
        with pytest.raises(ValueError, match=why):
            parse_line(text)
    bad = block_commands(split_page("```bash\nrlfast eval $RUN\n```\n", "p.md").blocks[0])
    assert bad[0].error.startswith("p.md:2: cannot read `rlfast eval $RUN`")


def test_marker_rules():
    text = ("<!-- not run: needs a GPU -->\n```bash\nrlfast a\n```\n\n"
            "<!-- not run: -->\n```bash\nrlfast b\n```\n\n"
            "<!-- not run: REASON -->\n```bash\nrlfast c\n```\n\n"
            "<!-- not run: on a cluster -->\n\n```bash\nrlfast d\n```\n\n"
            "<!-- not run: output -->\n```text\nsteps\n```\n\n"
            "<!-- not-run: a typo -->\n```bash\nrlfast e\n```\n\n"
            "<!--not run: no space is fine-->\n```bash\nrlfast f\n```\n\n"
            "Write `<!-- not run: REASON -->` before the fence.\n\n"
            "```text\n<!-- not run: shown, not a marker -->\n```\n")
    page = split_page(text, "p.md")
    problems = marker_problems(page)
    assert [p.split(":")[1] for p in problems] == ["6", "11", "16", "22", "27"], problems
    assert "gives no reason" in problems[0] and "gives no reason" in problems[1]
    assert "right before a ```bash fence" in problems[2] and "```bash" in problems[3]
    assert "write the marker as" in problems[4]
    reasons = [c.not_run for b in page.blocks if b.lang == "bash" for c in block_commands(b)]
    assert reasons == ["needs a GPU", "", "REASON", None, None, "no space is fine"]


def test_commands_outside_bash_blocks_are_reported():
    text = ("Run:\n\n    rlfast train ppo CartPole-v1\n\n"
            "```sh\nrlfast train a b\n```\n\n```console\nok\n```\n\n"
            "```\nPYTHONPATH=x python y.py\n```\n\n```\n2026-01-01 | rlfast train\n```\n\n"
            "```bash\n$ rlfast train a b\n```\n\n"
            "```text\nrlfast train ppo CartPole-v1 on cpu\n```\n\n"
            "- a list item\n\n    whose second paragraph is prose\n")
    problems = hidden_command_problems(split_page(text, "p.md"))
    assert [p.split(":")[1] for p in problems] == ["3", "5", "9", "13", "22"], problems
    assert "indented block" in problems[0] and "```sh block" in problems[1]
    assert "unlabelled fence" in problems[3] and "prompt" in problems[4]


def test_pages_are_the_readme_and_docs_less_generated(tmp_path):
    for name in ("README.md", "docs/index.md", "docs/guides/a.md", "docs/generated/keys.md",
                 "docs/notes.txt"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("```bash\nrlfast train ppo CartPole-v1\n```\n")
    assert [p.relative_to(tmp_path).as_posix() for p in doc_pages(tmp_path)] == [
        "README.md", "docs/guides/a.md", "docs/index.md"]
    assert [c.id for c in documented_commands(tmp_path)] == [
        "README.md:2", "docs/guides/a.md:2", "docs/index.md:2"]


@pytest.fixture
def ws(tmp_path):
    """A workspace whose tiny run is a stand-in folder (the plans only copy it)."""
    fake = tmp_path / "tiny"
    fake.mkdir()
    (fake / "params.json").write_text("{}")
    (fake / "progress.csv").write_text("Diagnostics/CumSteps,ReturnAverage\n0,1\n256,2\n")
    (tmp_path / "page").mkdir()
    return Workspace(tmp_path / "page", tmp_path / "scratch", lambda: fake)


def _plan(text, ws):
    return plan(parse_line(text)[0], ws)


def test_train_keeps_every_documented_flag_and_appends_a_short_budget(ws):
    documented = ["train", "ppo", "CartPole-v1", "--steps", "1000000", "--sampler", "cpu",
                  "--set", "algo.learning_rate=3e-4", "--log-dir", "data/ppo"]
    p = _plan("rlfast " + " ".join(documented), ws)
    assert p.in_process and p.needs == [] and p.env == {}
    assert p.argv[:len(documented)] == documented
    tail = p.argv[len(documented):]
    assert tail[:5] == ["--steps", "1", "--no-progress", "--n-envs", "1"]  # log dir kept
    assert "sampler.eval_n_envs=0" in tail and "runner.log_interval_steps=1" in tail
    p = _plan("rlfast train dqn CartPole-v1 --n-envs 4 --set runner.stop_return=400", ws)
    assert p.argv.count("--n-envs") == 1 and "--log-dir" in p.argv
    assert "sampler.eval_n_envs=1" in p.argv  # stop_return needs an evaluation
    (ws.cwd / "data/ppo").mkdir(parents=True)
    (ws.cwd / "data/ppo/params.json").write_text("{}")
    assert "--overwrite" in _plan("rlfast " + " ".join(documented), ws).argv


def test_evolution_strategies_get_their_own_budget_and_extras(ws):
    p = _plan("python -m rlfast train cmaes Pendulum-v1", ws)
    assert p.in_process and p.argv[:3] == ["train", "cmaes", "Pendulum-v1"]
    assert "--n-envs" not in p.argv and "strategy.popsize=4" in p.argv
    assert p.needs == [("cma", "es")]


@pytest.mark.parametrize("env_id,extra", [("pz:mpe2.simple_spread_v3", "pettingzoo"),
                                          ("popgym:RepeatPreviousEasy", "popgym"),
                                          ("minatar:breakout", "minatar"),
                                          ("HalfCheetah-v5", "mujoco"),
                                          ("LunarLander-v3", "box2d"), ("CartPole-v1", None)])
def test_environments_name_the_extra_they_need(ws, env_id, extra):
    needs = _plan(f"rlfast train ppo {env_id}", ws).needs
    assert {e for _, e in needs} == ({extra} if extra else set())


def test_placeholders_stand_for_the_tiny_run(ws):
    for arg in ("data/local/20260101/ppo/run_0", "'<run dir>'", "RUN_DIR", "LOG_ROOT/x",
                "data/sweep/*", "runs/..."):
        assert is_placeholder(arg.strip("'")), arg
        p = _plan(f"rlfast eval {arg} --episodes 100", ws)
        assert p.argv[1] == str(ws.scratch / "run_dir") and (ws.scratch / "run_dir").is_dir()
        assert p.argv[-4:] == ["--episodes", "1", "--max-steps", "20"]
    assert not is_placeholder("my_run") and not is_placeholder("runs/ppo")
    with pytest.raises(CannotRun, match="no placeholder"):
        _plan("rlfast eval runs/ppo", ws)
    (ws.cwd / "runs/ppo").mkdir(parents=True)  # made by an earlier command of the page
    assert _plan("rlfast eval runs/ppo", ws).argv[1] == "runs/ppo"
    p = _plan("rlfast resume RUN_DIR --steps 100000", ws)
    assert p.argv[-3:-1] == ["--steps", "257"]  # one iteration past the run's 256 steps
    p = _plan("rlfast plot data/a data/b -o fig.png --smooth 3", ws)
    assert p.argv[1:3] == [str(ws.scratch / "run_dir")] * 2 and p.argv[3:] == [
        "-o", "fig.png", "--smooth", "3"]
    assert p.needs == [("matplotlib", "plot")]
    assert {e for _, e in _plan("rlfast watch RUN_DIR --video a.mp4", ws).needs} == {"video"}
    assert {e for _, e in _plan("rlfast export RUN_DIR", ws).needs} == {"export"}
    assert _plan("rlfast export RUN_DIR --format torchscript", ws).needs == []


def test_unknown_programs_and_scripts_say_what_to_do(ws):
    for text in ("pip install -e .", "torchrun --standalone -m rlfast train ppo CartPole-v1",
                 "sbatch job.sbatch", "mkdocs build --strict"):
        with pytest.raises(CannotRun, match="mark its block `<!-- not run: REASON -->`"):
            _plan(text, ws)
    with pytest.raises(CannotRun, match="short budget; mark"):
        _plan("python examples/example_1_ppo_cartpole.py", ws)
    with pytest.raises(CannotRun, match="no such file"):
        _plan("python scripts/no_such_script.py", ws)
    with pytest.raises(CannotRun, match="no such subcommand"):
        _plan("rlfast fly ppo", ws)
    with pytest.raises(CannotRun, match="write into the checkout"):
        _plan("python scripts/reproduce.py --page", ws)


def test_scripts_and_prefixed_commands_run_as_processes_with_absolute_paths(ws):
    p = _plan("python scripts/launch/launch_ppo_cartpole_sweep.py --log-root data/sweep", ws)
    assert not p.in_process and p.argv[:2] == [
        sys.executable, str(ROOT / "scripts/launch/launch_ppo_cartpole_sweep.py")]
    assert p.argv[2:] == ["--log-root", "data/sweep", "--steps", "1"] and p.needs == []
    p = _plan("python scripts/launch/launch_slurm_sweep.py --local --log-root data/s", ws)
    assert p.argv[2:] == ["--local", "--log-root", "data/s", "--steps", "1"]
    assert p.needs == [("submitit", "slurm")]
    with pytest.raises(CannotRun, match="Slurm cluster; mark it"):
        _plan("python scripts/launch/launch_slurm_sweep.py --partition cpu", ws)
    p = _plan("PYTHONPATH=examples RLFAST_PLUGINS=custom_env_family "
              "rlfast train ppo corridor:12", ws)
    assert not p.in_process and p.argv[:5] == [sys.executable, "-m", "rlfast", "train", "ppo"]
    assert p.env == {"PYTHONPATH": str(ROOT / "examples"), "RLFAST_PLUGINS": "custom_env_family"}
    assert _plan("rlfast --help", ws).argv == ["--help"]


# --- The real pages -------------------------------------------------------------------------


def test_the_readme_shows_commands():
    assert any(c.page == "README.md" for c in COMMANDS), \
        "the README shows the two commands in a ```bash block"


def test_not_run_markers_give_a_reason_and_sit_before_a_bash_fence():
    problems = [p for path in doc_pages() for p in marker_problems(read_page(path))]
    assert problems == [], "\n".join(problems)


def test_no_command_hides_outside_bash_blocks():
    problems = [p for path in doc_pages() for p in hidden_command_problems(read_page(path))]
    assert problems == [], "\n".join(problems)


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """A callable returning a finished run directory, trained on its first call."""
    made = []

    def get() -> Path:
        if not made:
            made.append(train_tiny_run(tmp_path_factory.mktemp("tiny") / "run"))
        return made[0]
    return get


@pytest.fixture(scope="module")
def page_dir(tmp_path_factory):
    """A callable giving each page its own folder, shared by the page's commands."""
    folders = {}

    def get(page: str) -> Path:
        if page not in folders:
            folders[page] = tmp_path_factory.mktemp(re.sub(r"\W+", "_", page))
        return folders[page]
    return get


@contextlib.contextmanager
def _deadline(seconds: float):
    """Raise TimeoutError in this (main) thread after ``seconds``."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(signum, frame):
        raise TimeoutError(f"the command ran past {seconds} s")
    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _run_in_process(argv, env, cwd, monkeypatch, capfd):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(cwd)
    threads = torch.get_num_threads()
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        with _deadline(TIMEOUT_S):
            try:
                code = main(argv)
            except SystemExit as e:  # --help, argparse errors
                code = e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
    finally:
        torch.set_num_threads(threads)
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
    out, err = capfd.readouterr()
    return code, out + err


def _run_process(argv, env, cwd):
    proc = subprocess.Popen(argv, cwd=cwd, env=dict(os.environ, OMP_NUM_THREADS="1", **env),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=TIMEOUT_S)
        code = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, code = proc.communicate()[0] + f"\n(killed after {TIMEOUT_S} s)", "timeout"
    deadline = time.monotonic() + 10
    while session_pids(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = session_pids(proc.pid)
    if left:
        os.killpg(proc.pid, signal.SIGKILL)
    assert left == [], f"the command left processes {left} behind"
    return code, out


def _run(part, ws, monkeypatch, capfd):
    try:
        how = plan(part, ws)
    except CannotRun as e:
        pytest.fail(str(e))
    for module, extra in how.needs:
        pytest.importorskip(module, reason=f"needs the {extra} extra: "
                                           f"pip install -e \".[{extra}]\"")
    env = dict(QUIET_ENV, RLFAST_DATA_DIR=str(ws.cwd / "data"), WANDB_DIR=str(ws.scratch),
               **how.env)
    ws.scratch.mkdir(parents=True, exist_ok=True)
    if how.in_process:
        return how, *_run_in_process(how.argv, env, ws.cwd, monkeypatch, capfd)
    return how, *_run_process(how.argv, env, ws.cwd)


@pytest.mark.parametrize("command", COMMANDS, ids=[c.id for c in COMMANDS])
def test_documented_command_runs(command, page_dir, tiny_run, tmp_path, monkeypatch, capfd):
    if command.not_run is not None:
        pytest.skip(f"{command.id}: not run: {command.not_run}")
    if command.error:
        pytest.fail(command.error)
    ws = Workspace(page_dir(command.page), tmp_path / "scratch", tiny_run)
    shm_before, children_before = shm_entries(), set(live_children())
    for part in command.parts:
        how, code, out = _run(part, ws, monkeypatch, capfd)
        shown = " ".join(how.argv if how.in_process else how.argv[1:])
        assert code == 0, (f"{command.id}: `{command.text}` exited {code}; run as "
                           f"`{'rlfast ' if how.in_process else ''}{shown}`:\n{out[-3000:]}")
    deadline = time.monotonic() + 10
    while set(live_children()) - children_before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert set(live_children()) - children_before == set(), "processes left behind"
    # Shared-memory segments only: semaphores (sem.mp-*) are not judged here, as in
    # tests/integration/test_process_cleanup.py. Seen in a fresh-clone CI run: three sem.mp-
    # entries held by no xdist worker's process appeared beside the W&B offline command, whose
    # service outlives the command; rlfast's own semaphore hygiene is checked by the torchrun
    # and distributed CLI tests.
    assert new_shm_entries(shm_before) == []


def test_a_run_made_on_a_page_is_used_by_the_next_command(tmp_path, monkeypatch, capfd,
                                                          tiny_run):
    """The chaining the module docstring promises, end to end on a page of two commands."""
    text = ("```bash\nrlfast train ppo CartPole-v1 --sampler serial --log-dir data/ppo\n"
            "rlfast eval data/ppo --episodes 5\n```\n")
    commands = block_commands(split_page(text, "p.md").blocks[0])
    ws = Workspace(tmp_path / "page", tmp_path / "scratch", tiny_run)
    ws.cwd.mkdir()
    _, code, out = _run(commands[0].parts[0], ws, monkeypatch, capfd)
    assert code == 0, out
    params = json.loads((ws.cwd / "data/ppo/params.json").read_text())
    assert params["config"]["sampler"]["batch_B"] == 1 and params["config"]["runner"][
        "n_steps"] == 1
    how, code, out = _run(commands[1].parts[0], ws, monkeypatch, capfd)
    assert code == 0, out
    assert how.argv[:2] == ["eval", "data/ppo"] and "Return over 1 episode" in out
