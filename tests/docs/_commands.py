"""The shell commands shown in the documentation: where they are, how they are read, and how
each is run on a short budget by tests/docs/test_documented_commands.py.

Where: README.md and every ``docs/**/*.md`` except ``docs/generated/``. A command is a line of
a fenced ```bash block (a line ending in ``\\`` goes on on the next one); blank lines and
``#`` comments are skipped, and ``&&`` or ``;`` chain commands that run in turn on one line.
A block whose opening fence comes right after a line ``<!-- not run: REASON -->`` is not run;
REASON says why (a GPU, a Slurm cluster, several machines, a budget that cannot be shortened,
an install command that .ci/run runs itself). Output shown to the reader goes in ```text
blocks; a command anywhere else (an indented code block, a ```sh / ```shell / ```console
block, an unlabelled fence) is reported, so that none escapes the test.

How a command is run (:func:`plan`): the program decides.

- ``rlfast train ALGO ENV ...`` (also ``python -m rlfast ...``) runs with every flag as
  written, then, appended so that argparse's last-one-wins and ``--set``'s in-order merge
  make them count, a short budget: ``--steps 1`` (one iteration), ``--no-progress``, one
  environment (``--n-envs 1``) unless the command fixes ``--n-envs``, ``--affinity`` or
  ``--world-size``, no evaluation (``sampler.eval_n_envs=0``; one short one where the command
  sets ``runner.stop_return``, which needs it), ``runner.log_interval_steps=1`` and
  ``sampler.max_decorrelation_steps=0``. An evolution strategy (cem, cmaes, openai_es) gets
  ``--steps 1`` with a population of 4 and one episode per candidate instead. Without
  ``--log-dir`` the run goes to a fresh folder; a relative ``--log-dir`` is kept (it lands in
  the page's folder, below).
- ``rlfast eval / watch / export / plot / resume`` run on a run directory: the one named, if
  an earlier command of the same page made it, or else, when the name is a placeholder, a
  copy of a tiny finished run (PPO on CartPole, 256 steps) that the test module trains once.
  A placeholder is a run-directory argument that is a path under ``data/`` (the default data
  folder, where a reader's runs land: ``data/local/...``, ``data/sweep/...``), holds a
  ``<word>`` in angle brackets (``<run dir>``), is an upper-case metavar (``RUN_DIR``,
  ``LOG_ROOT/ppo_cartpole_lr``) or holds ``*`` or ``...``. Any other run directory that does
  not exist is an error. Budgets: eval and watch play one episode of at most 20 steps;
  resume trains one more iteration; watch draws into SDL's dummy video driver (no window).
- ``rlfast tune``: one trial of one iteration, with one evaluation episode.
- ``python scripts/...`` and ``python examples/...``: the scripts of :data:`SCRIPTS`, each with
  its own short-budget flags; a script missing there fails, with what to do.
- Anything else (``pip``, ``torchrun``, ``sbatch``, ``mkdocs``, ``bash``, ...) fails with
  "mark it ``<!-- not run: ... -->`` or teach the test".

Every command of a page runs in that page's own temporary folder, in the order of the page,
so that ``rlfast train ... --log-dir data/ppo`` followed by ``rlfast eval data/ppo`` uses
the run just trained; a relative path that names a file or folder of the checkout
(``scripts/...``, ``examples/...``) is made absolute first. ``RLFAST_DATA_DIR`` points into
that folder too, so nothing is written into the checkout. A command that needs an optional
extra (``pz:`` environments, MuJoCo ids, ``cmaes``, ``tune``, ``plot``, ``export``, ...) is
skipped, naming the extra, where that extra is not installed.
"""
from __future__ import annotations

import argparse
import csv
import dataclasses
import functools
import re
import shlex
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

MARK_OR_TEACH = ("mark its block `<!-- not run: REASON -->` (on the line right before the "
                 "```bash fence) or teach tests/docs/_commands.py to run it")
SHELL_LANGS = frozenset({"sh", "shell", "console", "zsh", "terminal", "shell-session",
                         "bash-session", "sh-session", "shellsession", "bashsession", "fish",
                         "powershell", "ps1", "bat", "cmd"})
# The first words that make a line of an indented or unlabelled block read as a command.
KNOWN_PROGRAMS = frozenset({"rlfast", "python", "python3", "pip", "pip3", "torchrun", "sbatch",
                            "srun", "salloc", "bash", "sh", "mkdocs", "pytest", "git", "cd",
                            "export", "conda", "docker", "nvidia-smi", "ruff", "tensorboard",
                            "wandb", "uv", "make", "source", "mkdir", "ls", "cat", "curl",
                            "wget", "apt", "apt-get", "sudo"})

_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^`]*)$")
_MARKER = re.compile(r"<!--\s*not run:(?P<reason>.*?)-->")
_LOOSE_MARKER = re.compile(r"<!--\s*not[\s_-]*run", re.IGNORECASE)
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_ANGLE = re.compile(r"<[A-Za-z][^<>\n]*>")
_PLACEHOLDER = re.compile(r"^(data/.*|.*<[^<>]+>.*|[A-Z][A-Z0-9_]*(/.*)?|.*\*.*|.*\.\.\..*)$")
_OPERATORS = frozenset("();<>|&")


class CannotRun(Exception):
    """A documented command that the test cannot run; the message says why and what to do."""


# --- Finding the blocks -------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Block:
    """A fenced code block of a page."""
    page: str  # relative to the checkout: "README.md", "docs/guides/sweeps.md"
    line: int  # the opening fence's line, from 1
    lang: str  # the info string's first word, lower case ("" for none)
    body: tuple[tuple[int, str], ...]  # (line, text less the fence's indentation)
    before: str  # the line right before the opening fence, stripped ("" for none)


@dataclasses.dataclass(frozen=True)
class Page:
    """A page split into its fenced blocks and the lines outside them (its prose)."""
    path: str
    blocks: tuple[Block, ...]
    prose: tuple[tuple[int, str], ...]


def doc_pages(root: Path = ROOT) -> list[Path]:
    """README.md and the Markdown pages under docs/, less docs/generated/."""
    pages = [root / "README.md"] if (root / "README.md").is_file() else []
    docs = root / "docs"
    if docs.is_dir():
        pages += sorted(p for p in docs.rglob("*.md")
                        if p.relative_to(docs).parts[0] != "generated")
    return pages


def _language(info: str) -> str:
    word = info.strip().split(maxsplit=1)[0] if info.strip() else ""
    return word.strip("{}").lstrip(".").lower()


def split_page(text: str, path: str) -> Page:
    """The fenced blocks of ``text`` (CommonMark fences of backticks or tildes, at any
    indentation, as inside admonitions; an unclosed fence runs to the end) and its prose."""
    lines = text.splitlines()
    blocks, prose = [], []
    i = 0
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if not opening:
            prose.append((i + 1, lines[i]))
            i += 1
            continue
        indent, fence = len(opening["indent"]), opening["fence"]
        closing = re.compile(rf"^[ \t]*{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$")
        body, j = [], i + 1
        while j < len(lines) and not closing.match(lines[j]):
            body.append((j + 1, _dedent(lines[j], indent)))
            j += 1
        before = lines[i - 1].strip() if i else ""
        blocks.append(Block(path, i + 1, _language(opening["info"]), tuple(body), before))
        i = j + 1
    return Page(path, tuple(blocks), tuple(prose))


def _dedent(line: str, indent: int) -> str:
    cut = 0
    while cut < indent and cut < len(line) and line[cut] in " \t":
        cut += 1
    return line[cut:]


def read_page(path: Path, root: Path = ROOT) -> Page:
    return split_page(path.read_text(encoding="utf-8"), path.relative_to(root).as_posix())


def not_run_reason(block: Block) -> str | None:
    """The reason of the ``<!-- not run: REASON -->`` line right before ``block``, or None."""
    found = _MARKER.fullmatch(block.before)
    return found["reason"].strip() if found else None


def _is_real_reason(reason: str) -> bool:
    return (re.search(r"[A-Za-z]{3,}", reason) is not None
            and reason.strip(" .").upper() not in {"REASON", "TODO", "TBD", "FIXME"})


def marker_problems(page: Page) -> list[str]:
    """Each not-run marker of the page's prose that is malformed, gives no reason, or does not
    sit on the line right before a ```bash fence."""
    bash_fences = {b.line for b in page.blocks if b.lang == "bash"}
    problems = []
    for line, text in page.prose:
        stripped = text.strip()
        if not (stripped.startswith("<!--") and _LOOSE_MARKER.search(stripped)):
            continue
        where = f"{page.path}:{line}"
        found = _MARKER.fullmatch(stripped)
        if found is None:
            problems.append(f"{where}: write the marker as `<!-- not run: REASON -->`, alone "
                            f"on its line: {stripped!r}")
        elif not _is_real_reason(found["reason"]):
            problems.append(f"{where}: the not-run marker gives no reason: {stripped!r}")
        elif line + 1 not in bash_fences:
            problems.append(f"{where}: the not-run marker must sit on the line right before "
                            f"a ```bash fence")
    return problems


def looks_like_command(text: str) -> bool:
    """Whether a line reads as a shell command: its first word, after a ``$`` prompt and
    ``NAME=value`` assignments, is a known program or a path to a script."""
    words = text.strip().removeprefix("$ ").split()
    while words and _ASSIGNMENT.match(words[0]):
        words = words[1:]
    return bool(words) and (words[0] in KNOWN_PROGRAMS
                            or words[0].startswith(("./", "scripts/", ".ci/")))


def hidden_command_problems(page: Page) -> list[str]:
    """Commands outside ```bash blocks (indented code, ```sh / ```shell / ```console, an
    unlabelled fence) and ``$`` prompts inside them."""
    problems = []
    for line, text in page.prose:
        if len(text.expandtabs(4)) - len(text.expandtabs(4).lstrip()) >= 4 \
                and looks_like_command(text):
            problems.append(f"{page.path}:{line}: a command in an indented block; put it in "
                            f"a ```bash fence (or ```text, if it is output): {text.strip()!r}")
    for block in page.blocks:
        where = f"{page.path}:{block.line}"
        if block.lang in SHELL_LANGS:
            problems.append(f"{where}: a ```{block.lang} block; commands go in ```bash, "
                            f"output in ```text")
        elif block.lang == "":
            for line, text in block.body:
                if looks_like_command(text):
                    problems.append(f"{where}: an unlabelled fence holds a command (line "
                                    f"{line}); label it ```bash (or ```text, if it is "
                                    f"output): {text.strip()!r}")
                    break
        elif block.lang == "bash":
            problems += [f"{page.path}:{line}: drop the `$ ` prompt: {text.strip()!r}"
                         for line, text in block.body if text.lstrip().startswith("$ ")]
    return problems


# --- Reading the commands -------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Part:
    """One simple command: its ``NAME=value`` prefixes and its words."""
    env: tuple[tuple[str, str], ...]
    argv: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class Command:
    """One command line of a ```bash block (its ``\\`` continuations joined)."""
    page: str
    line: int
    text: str
    parts: tuple[Part, ...]  # run in turn (``&&`` or ``;``)
    not_run: str | None  # the reason of the block's not-run marker
    error: str | None = None  # why the line cannot be read, or None

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"


def strip_comment(text: str) -> str:
    """``text`` up to its shell comment: a ``#`` outside quotes at the start of a word."""
    quote, escaped = None, False
    for i, char in enumerate(text):
        if escaped:
            escaped = False
        elif char == "\\" and quote != "'":
            escaped = True
        elif quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or text[i - 1].isspace()):
            return text[:i].rstrip()
    return text.rstrip()


def logical_lines(block: Block) -> list[tuple[int, str]]:
    """The block's command lines: continuations joined, blanks and comments dropped."""
    out, pending, start = [], [], 0
    for line, text in block.body:
        if not pending and (not text.strip() or text.lstrip().startswith("#")):
            continue
        if not pending:
            start = line
        if text.rstrip().endswith("\\"):
            pending.append(text.rstrip()[:-1].strip())
            continue
        out.append((start, " ".join(pending + [text.strip()])))
        pending = []
    if pending:
        out.append((start, " ".join(pending)))
    return out


def parse_line(text: str) -> tuple[Part, ...]:
    """The simple commands of a command line; ValueError for what the test cannot run: an
    operator other than ``&&`` and ``;`` (a pipe, a redirection), a shell expansion (``$``,
    backticks) or unbalanced quotes."""
    code = strip_comment(text)
    if "$" in code or "`" in code:
        raise ValueError("it uses a shell expansion ($ or `): write the literal value")
    angles = {}

    def hold(found: re.Match) -> str:  # <placeholder> words are no redirections
        angles[f"__angle{len(angles)}__"] = found[0]
        return f"'__angle{len(angles) - 1}__'"

    lexer = shlex.shlex(_ANGLE.sub(hold, code), posix=True, punctuation_chars=True)
    lexer.whitespace_split, lexer.commenters = True, ""
    tokens = list(lexer)  # ValueError on unbalanced quotes
    for key, value in angles.items():
        tokens = [t.replace(key, value) for t in tokens]
    groups: list[list[str]] = [[]]
    for token in tokens:
        if token in ("&&", ";"):
            groups.append([])
        elif set(token) <= _OPERATORS:
            raise ValueError(f"the operator {token!r}: one command per line (&& and ; are "
                             f"the only operators the test runs)")
        else:
            groups[-1].append(token)
    parts = []
    for words in groups:
        env = []
        while words and _ASSIGNMENT.match(words[0]):
            name, value = words.pop(0).split("=", 1)
            env.append((name, value))
        if not words:
            raise ValueError("an empty command")
        parts.append(Part(tuple(env), tuple(words)))
    return tuple(parts)


def block_commands(block: Block) -> list[Command]:
    """The commands of a ```bash block, each with the block's not-run reason."""
    reason = not_run_reason(block)
    commands = []
    for line, text in logical_lines(block):
        try:
            commands.append(Command(block.page, line, text, parse_line(text), reason))
        except ValueError as e:
            commands.append(Command(block.page, line, text, (), reason,
                                    error=f"{block.page}:{line}: cannot read `{text}`: {e}"))
    return commands


def documented_commands(root: Path = ROOT) -> list[Command]:
    """Every command of every ```bash block of the pages, in page order."""
    return [command for path in doc_pages(root)
            for block in read_page(path, root).blocks if block.lang == "bash"
            for command in block_commands(block)]


# --- Running them on a short budget ---------------------------------------------------------


@dataclasses.dataclass
class Workspace:
    """Where a command runs: ``cwd``, its page's folder (shared by the page's commands);
    ``scratch``, a fresh folder of this command; ``tiny_run()``, a finished run directory
    (made on the first call)."""
    cwd: Path
    scratch: Path
    tiny_run: Callable[[], Path]


@dataclasses.dataclass
class Plan:
    """How to run one simple command: ``rlfast.cli.main(argv)`` in this process
    (``in_process``), or ``argv`` as a subprocess; ``env``: its added variables; ``needs``:
    (module, extra) pairs it cannot run without."""
    argv: list[str]
    in_process: bool
    env: dict[str, str]
    needs: list[tuple[str, str]]


ES_ALGOS = ("cem", "cmaes", "openai_es")
_TRAIN_BUDGET = ["runner.log_interval_steps=1", "sampler.max_decorrelation_steps=0"]
_NO_EVAL = ["sampler.eval_n_envs=0"]
_SHORT_EVAL = ["sampler.eval_n_envs=1", "sampler.eval_max_steps=500",
               "sampler.eval_max_trajectories=1"]
_ES_BUDGET = ["strategy.popsize=4", "evaluator.episodes_per_candidate=1",
              "evaluator.eval_episodes=1", "evaluator.max_episode_steps=100"]
_PLAYBACK = ["--episodes", "1", "--max-steps", "20"]
# Environment ids and the extras they need: a prefix of the id, or a gymnasium id's name.
_FAMILY_NEEDS = (("pz:mpe2.", [("pettingzoo", "pettingzoo"), ("mpe2", "pettingzoo")]),
                 ("pz:pettingzoo.atari", [("pettingzoo", "pettingzoo-atari"),
                                          ("multi_agent_ale_py", "pettingzoo-atari")]),
                 ("pz:", [("pettingzoo", "pettingzoo")]),
                 ("popgym:", [("popgym", "popgym")]),
                 ("minatar:", [("minatar", "minatar")]))
_MUJOCO = frozenset({"Ant", "HalfCheetah", "Hopper", "Humanoid", "HumanoidStandup",
                     "InvertedDoublePendulum", "InvertedPendulum", "Pusher", "Reacher",
                     "Swimmer", "Walker2d"})
_BOX2D = frozenset({"LunarLander", "LunarLanderContinuous", "BipedalWalker",
                    "BipedalWalkerHardcore", "CarRacing"})
_ONNX = [("onnx", "export"), ("onnxscript", "export"), ("onnxruntime", "export")]


def env_needs(env_id: str) -> list[tuple[str, str]]:
    """The (module, extra) pairs an environment id needs."""
    for prefix, needs in _FAMILY_NEEDS:
        if env_id.startswith(prefix):
            return list(needs)
    name = env_id.split("-v", 1)[0]
    if name in _MUJOCO:
        return [("mujoco", "mujoco")]
    if name in _BOX2D:
        return [("Box2D", "box2d")]
    return []


def _flag_needs(args: list[str]) -> list[tuple[str, str]]:
    needs = []
    if _has(args, "--tensorboard"):
        needs.append(("tensorboard", "tensorboard"))
    if _has(args, "--wandb"):
        needs.append(("wandb", "wandb"))
    return needs


def _has(args: list[str], flag: str) -> bool:
    return any(a == flag or a.startswith(flag + "=") for a in args)


def _value(args: list[str], flag: str) -> str | None:
    """The last value given to ``flag`` (``--flag V`` or ``--flag=V``), or None."""
    value = None
    for i, arg in enumerate(args):
        if arg == flag and i + 1 < len(args):
            value = args[i + 1]
        elif arg.startswith(flag + "="):
            value = arg.split("=", 1)[1]
    return value


def _sets(keys: list[str]) -> list[str]:
    return [word for key in keys for word in ("--set", key)]


@functools.lru_cache(maxsize=None)
def _subparser(name: str) -> argparse.ArgumentParser:
    """The parser of ``rlfast NAME``."""
    from rlfast.cli import _parser
    parser = _parser()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    if name not in subparsers.choices:
        raise CannotRun(f"`rlfast {name}`: no such subcommand (rlfast has "
                        f"{', '.join(subparsers.choices)})")
    return subparsers.choices[name]


def positionals(sub: str, args: list[str]) -> list[int]:
    """The indices of ``args`` (what follows ``rlfast SUB``) that are positional arguments,
    by the options of ``SUB``'s real parser that take a value."""
    takes_value = {s for a in _subparser(sub)._actions for s in a.option_strings
                   if a.nargs != 0}
    found, skip = [], False
    for i, arg in enumerate(args):
        if skip:
            skip = False
        elif arg.startswith("-") and arg != "-":
            skip = arg in takes_value
        else:
            found.append(i)
    return found


def is_placeholder(arg: str) -> bool:
    """Whether a run-directory argument stands for the reader's own run (module docstring)."""
    return _PLACEHOLDER.match(arg) is not None


def _run_dir(arg: str, ws: Workspace) -> str:
    """The run directory that ``arg`` names: made earlier on the page, or a copy of the tiny
    run for a placeholder."""
    if (ws.cwd / arg).exists():
        return arg
    if not is_placeholder(arg):
        raise CannotRun(f"the run directory {arg!r} was made by no earlier command of the page "
                        f"and is no placeholder (data/..., <run dir>, RUN_DIR)")
    copy = ws.scratch / "run_dir"
    if not copy.exists():
        shutil.copytree(ws.tiny_run(), copy)
    return str(copy)


def cum_steps(run_dir: Path) -> int:
    """The last ``Diagnostics/CumSteps`` of a run's progress.csv (0 for none)."""
    try:
        with open(run_dir / "progress.csv", newline="") as f:
            rows = list(csv.DictReader(f))
    except FileNotFoundError:
        return 0
    return int(float(rows[-1]["Diagnostics/CumSteps"])) if rows else 0


def _log_dir_tail(args: list[str], ws: Workspace, default: str,
                  overwrite: bool = False) -> list[str]:
    """A fresh ``--log-dir`` where the command gives none or an absolute one (outside the
    page's folder); with ``overwrite``, ``--overwrite`` where a relative one already holds a
    run that an earlier command of the page made."""
    log_dir = _value(args, "--log-dir")
    if log_dir is None or Path(log_dir).is_absolute():
        return ["--log-dir", str(ws.scratch / default)]
    if overwrite and (ws.cwd / log_dir / "params.json").exists():
        return ["--overwrite"]
    return []


def _plan_train(args: list[str], ws: Workspace) -> tuple[list[str], list[tuple[str, str]]]:
    where = positionals("train", args[1:])
    if len(where) < 2:
        raise CannotRun("`rlfast train` needs ALGO and ENV")
    algo, env_id = args[1 + where[0]], args[1 + where[1]]
    tail = ["--steps", "1", "--no-progress"] + _log_dir_tail(args, ws, "run", overwrite=True)
    needs = env_needs(env_id) + _flag_needs(args)
    if algo in ES_ALGOS:
        if algo == "cmaes":
            needs.append(("cma", "es"))
        return args + tail + _sets(_ES_BUDGET), needs
    if not any(_has(args, f) for f in ("--n-envs", "--affinity", "--world-size")):
        tail += ["--n-envs", "1"]
    evaluation = _SHORT_EVAL if "stop_return" in " ".join(args) else _NO_EVAL
    return args + tail + _sets(evaluation + _TRAIN_BUDGET), needs


def _plan_on_run(args: list[str], ws: Workspace) -> list[str]:
    """``args`` with its run-directory arguments resolved (:func:`_run_dir`)."""
    args = list(args)
    where = positionals(args[0], args[1:])
    if not where:
        raise CannotRun(f"`rlfast {args[0]}` needs a run directory")
    for i in (where if args[0] == "plot" else where[:1]):
        args[1 + i] = _run_dir(args[1 + i], ws)
    return args


def _plan_resume(args, ws):
    args = _plan_on_run(args, ws)
    run = ws.cwd / args[1 + positionals("resume", args[1:])[0]]
    return args + ["--steps", str(cum_steps(run) + 1), "--no-progress"], []


def _plan_eval(args, ws):
    return _plan_on_run(args, ws) + _PLAYBACK, []


def _plan_watch(args, ws):
    needs = [("pygame", "video")]
    if _has(args, "--video"):
        needs += [("imageio", "video"), ("imageio_ffmpeg", "video")]
    return _plan_on_run(args, ws) + _PLAYBACK, needs


def _plan_plot(args, ws):
    return _plan_on_run(args, ws), [("matplotlib", "plot")]


def _plan_export(args, ws):
    return _plan_on_run(args, ws), (_ONNX if _value(args, "--format") in (None, "onnx") else [])


def _plan_tune(args, ws):
    where = positionals("tune", args[1:])
    if len(where) < 2:
        raise CannotRun("`rlfast tune` needs ALGO and ENV")
    tail = ["--trials", "1", "--steps", "1"] + _log_dir_tail(args, ws, "tune")
    needs = [("optuna", "tune")] + env_needs(args[1 + where[1]]) + _flag_needs(args)
    return args + tail + _sets(_SHORT_EVAL + ["sampler.max_decorrelation_steps=0"]), needs


_RLFAST = dict(train=_plan_train, resume=_plan_resume, eval=_plan_eval, watch=_plan_watch,
               plot=_plan_plot, export=_plan_export, tune=_plan_tune)


def _plan_rlfast(args: list[str], ws: Workspace) -> tuple[list[str], list[tuple[str, str]]]:
    """rlfast's argv with its short budget, and what it needs."""
    if not args or args[0] in ("-h", "--help") or "-h" in args or "--help" in args:
        return args, []
    if args[0] not in _RLFAST:
        _subparser(args[0])  # an unknown subcommand: says so
        raise CannotRun(f"`rlfast {args[0]}`: the test does not run this subcommand; "
                        f"{MARK_OR_TEACH}")
    return _RLFAST[args[0]](args, ws)


def _absolute(arg: str, root: Path = ROOT) -> str:
    """``arg`` (or the value of ``--flag=arg``, or each entry of a ``:`` list) made absolute
    where it is a relative path of a file or folder of the checkout, outside data/."""
    if arg.startswith("--") and "=" in arg:
        flag, value = arg.split("=", 1)
        return f"{flag}={_absolute(value, root)}"
    if ":" in arg and not arg.startswith(("/", "-")):
        return ":".join(_absolute(p, root) for p in arg.split(":")) if all(
            p and not p.startswith("/") for p in arg.split(":")) else arg
    if not arg or arg.startswith(("/", "-")) or Path(arg).parts[:1] == ("data",):
        return arg
    path = root / arg
    return str(path) if path.exists() and ".." not in Path(arg).parts else arg


# --- Scripts: each with its short budget ----------------------------------------------------


def _sweep(args: list[str], ws: Workspace) -> list[str]:
    tail = ["--steps", "1"]
    if not _has(args, "--log-root"):
        tail += ["--log-root", str(ws.scratch / "sweep")]
    return args + tail


def _custom_env_family(args: list[str], ws: Workspace) -> list[str]:
    # its arguments go on to `rlfast train ppo corridor:12`
    return args + ["--steps", "1", "--n-envs", "1", "--log-dir", str(ws.scratch / "run"),
                   *_sets(_NO_EVAL + _TRAIN_BUDGET)]


def _reproduce(args: list[str], ws: Workspace) -> list[str]:
    if _has(args, "--page") or _has(args, "--keep"):
        raise CannotRun("scripts/reproduce.py --page / --keep write into the checkout "
                        "(docs/results, README.md); mark it")
    if _has(args, "--list") or _has(args, "--table"):
        return args
    raise CannotRun("scripts/reproduce.py runs a results row for hours; mark it")


def _slurm_sweep(args: list[str], ws: Workspace) -> list[str]:
    if _has(args, "--dry-run"):
        return args
    if _has(args, "--local"):
        return _sweep(args, ws)
    raise CannotRun("scripts/launch/launch_slurm_sweep.py submits to a Slurm cluster; mark it "
                    "(or show it with --local or --dry-run)")


def _long(reason: str) -> Callable[[list[str], Workspace], list[str]]:
    def refuse(args: list[str], ws: Workspace) -> list[str]:
        raise CannotRun(f"{reason}; mark it")
    return refuse


# Repository-relative script -> its arguments with a short budget added (CannotRun: the
# script cannot run short, and its command must be marked).
SCRIPTS: dict[str, Callable[[list[str], Workspace], list[str]]] = {
    "scripts/launch/launch_ppo_cartpole_sweep.py": _sweep,
    "scripts/launch/launch_slurm_sweep.py": _slurm_sweep,
    "scripts/launch/launch_atari_gpu_workstation.py": lambda args, ws: (
        args if _has(args, "--dry-run") else _long("it trains Atari on a GPU workstation")(
            args, ws)),
    "examples/custom_env_family.py": _custom_env_family,
    "scripts/reproduce.py": _reproduce,
    "scripts/soak.py": _long("scripts/soak.py is a soak test of an hour"),
    "scripts/record_regression.py": _long("scripts/record_regression.py trains every "
                                          "regression run to its budget"),
}


# What a script of SCRIPTS imports from an optional extra: (module, extra) pairs.
SCRIPT_NEEDS = {"scripts/launch/launch_slurm_sweep.py": [("submitit", "slurm")]}


def _plan_script(script: str, args: list[str], ws: Workspace) -> list[str]:
    relative = Path(script).as_posix().removeprefix("./")
    if not (ROOT / relative).is_file():
        raise CannotRun(f"`python {script}`: no such file in the checkout")
    if relative not in SCRIPTS:
        raise CannotRun(f"`python {script}`: the test does not know this script's short "
                        f"budget; {MARK_OR_TEACH} (add it to SCRIPTS)")
    return [sys.executable, str(ROOT / relative), *SCRIPTS[relative](args, ws)]


def _relative(path: str) -> str:
    return Path(path).relative_to(ROOT).as_posix()


def plan(part: Part, ws: Workspace) -> Plan:
    """How to run ``part`` on a short budget in ``ws`` (see the module docstring); CannotRun
    for a program or script the test does not know."""
    env = {name: _absolute(value) for name, value in part.env}
    words = list(part.argv)
    program, args = words[0], words[1:]
    if program in ("python", "python3") and args[:2] in (["-m", "rlfast"], ["-m", "rlfast.cli"]):
        program, args = "rlfast", args[2:]
    if program == "rlfast":
        argv, needs = _plan_rlfast([_absolute(a) for a in args], ws)
        if env:  # NAME=value prefixes (PYTHONPATH, plug-ins): a process of its own
            return Plan([sys.executable, "-m", "rlfast", *argv], False, env, needs)
        return Plan(argv, True, env, needs)
    if program in ("python", "python3") and args and args[0].endswith(".py"):
        argv = _plan_script(args[0], [_absolute(a) for a in args[1:]], ws)
        return Plan(argv, False, env, list(SCRIPT_NEEDS.get(_relative(argv[1]), [])))
    raise CannotRun(f"`{program}`: the test does not know this program; {MARK_OR_TEACH}")
