"""The README's examples run as written.

Its ``python`` code blocks that call ``run_experiments`` are executed with the real
``make_variants`` / ``make_random_variants`` / ``encode_affinity`` and with
``run_experiments`` bound to the real signature and run as a dry run (the plan is printed,
nothing is started or written); its inline ``run_experiments(...)`` spans must use keywords
the function takes. The line count it gives for a default ``rlfast train`` run is checked
against the parts it names, on a short run.
"""
from __future__ import annotations

import ast
import csv
import inspect
import re
from pathlib import Path

import pytest

import rlfast.launching
from rlfast.cli import main
from rlfast.launching.slurm import SLURM_KEYS

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
REAL_RUN_EXPERIMENTS = rlfast.launching.run_experiments


def python_blocks(text: str) -> list[str]:
    """The bodies of the text's fenced ```python code blocks."""
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.DOTALL | re.MULTILINE)


def inline_calls(text: str, name: str) -> list[str]:
    """The inline code spans (single backticks, possibly across lines) that call ``name``,
    outside the fenced code blocks."""
    prose = re.sub(r"^```.*?^```", "", text, flags=re.DOTALL | re.MULTILINE)
    return [span for span in re.findall(r"(?<!`)`([^`]+)`(?!`)", prose)
            if span.lstrip().startswith(f"{name}(")]


SWEEP_SNIPPETS = [b for b in python_blocks(README) if "run_experiments(" in b]


def test_found_the_launch_snippets():
    assert len(SWEEP_SNIPPETS) >= 2  # the sweep of "Sweeps and affinity codes" and random search
    assert any("make_random_variants" in b for b in SWEEP_SNIPPETS)


@pytest.mark.parametrize("snippet", SWEEP_SNIPPETS,
                         ids=[f"snippet{k}" for k in range(len(SWEEP_SNIPPETS))])
def test_run_experiments_snippet_runs_as_written(snippet, tmp_path, monkeypatch, capsys):
    compile(snippet, "README.md", "exec")
    calls = []

    def checked_run_experiments(*args, **kwargs):
        # a TypeError here is the README calling run_experiments with the wrong arguments
        inspect.signature(REAL_RUN_EXPERIMENTS).bind(*args, **kwargs)
        calls.append((args, kwargs))
        return REAL_RUN_EXPERIMENTS(*args, **dict(kwargs, dry_run=True))

    monkeypatch.setattr(rlfast.launching, "run_experiments", checked_run_experiments)
    monkeypatch.chdir(ROOT)  # the snippets name their scripts relative to the checkout
    monkeypatch.setenv("RLFAST_DATA_DIR", str(tmp_path))
    exec(compile(snippet, "README.md", "exec"), {"__name__": "readme_snippet"})
    assert len(calls) == 1
    out = capsys.readouterr().out
    assert "[dry run]" in out and str(tmp_path) in out
    assert not any(tmp_path.iterdir())  # a dry run writes nothing


def test_inline_run_experiments_calls_use_its_keywords():
    spans = inline_calls(README, "run_experiments")
    assert spans, "the README's Slurm section shows run_experiments(..., backend='slurm')"
    parameters = inspect.signature(REAL_RUN_EXPERIMENTS).parameters
    for span in spans:
        call = ast.parse(span, mode="eval").body
        assert isinstance(call, ast.Call), span
        for keyword in call.keywords:
            assert keyword.arg in parameters, f"{keyword.arg!r} in README's `{span}`"
            if keyword.arg == "slurm" and isinstance(keyword.value, ast.Call):
                for option in keyword.value.keywords:
                    assert option.arg in SLURM_KEYS, f"slurm option {option.arg!r}: `{span}`"


def test_default_run_prints_the_lines_the_readme_names(tmp_path, capsys):
    """README: a first line (device, sampler, log dir), the column header, one row per
    evaluation, ``Logs: DIR`` and the final return line."""
    assert "one row per evaluation" in README and "`Logs: DIR`" in README
    log_dir = tmp_path / "run"
    assert main(["train", "ppo", "CartPole-v1", "--steps", "1024", "--sampler", "serial",
                 "--n-envs", "4", "--log-dir", str(log_dir), "--no-progress",
                 "--set", "sampler.batch_T=64", "--set", "runner.log_interval_steps=512",
                 "--set", "sampler.eval_max_trajectories=2"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    with open(log_dir / "progress.csv", encoding="utf-8") as f:
        n_rows = len(list(csv.DictReader(f)))
    assert n_rows == 3  # steps 0, 512, 1024
    assert len(out) == n_rows + 4, "\n".join(out)
    assert out[0].split(" | ")[-1].startswith("rlfast train ppo CartPole-v1 on ")
    assert str(log_dir) in out[0]
    assert "steps" in out[1] and "eval return" in out[1]
    assert out[-2] == f"Logs: {log_dir}"
    assert out[-1].startswith("Final evaluation return: ")
