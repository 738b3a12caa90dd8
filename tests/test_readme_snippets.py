"""The examples of the README and of the docs site (``docs/**/*.md``) run as written.

Their ``python`` code blocks that call ``run_experiments`` (the sweeps guide,
``docs/guides/sweeps.md``) are executed with the real ``make_variants`` /
``make_random_variants`` / ``encode_affinity`` and with ``run_experiments`` bound to the real
signature and run as a dry run (the plan is printed, nothing is started or written); their
inline ``run_experiments(...)`` spans must use keywords the function takes. The line count
that ``docs/getting-started/first-run.md`` gives for a default ``rlfast train`` run is checked
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
# The README and every page of the docs site, by path relative to the checkout.
DOCS = {path.relative_to(ROOT).as_posix(): path.read_text(encoding="utf-8")
        for path in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]}
FIRST_RUN = "docs/getting-started/first-run.md"
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


# (page, snippet) for every python block that calls run_experiments
SWEEP_SNIPPETS = [(path, b) for path, text in DOCS.items() for b in python_blocks(text)
                  if "run_experiments(" in b]


def test_found_the_launch_snippets():
    assert FIRST_RUN in DOCS and "docs/guides/sweeps.md" in DOCS
    snippets = [b for _, b in SWEEP_SNIPPETS]
    assert len(snippets) >= 2  # the sweep of "Sweeps and affinity codes" and random search
    assert any("make_random_variants" in b for b in snippets)


@pytest.mark.parametrize("path,snippet", SWEEP_SNIPPETS,
                         ids=[f"{path}:snippet{k}" for k, (path, _) in enumerate(SWEEP_SNIPPETS)])
def test_run_experiments_snippet_runs_as_written(path, snippet, tmp_path, monkeypatch, capsys):
    compile(snippet, path, "exec")
    calls = []

    def checked_run_experiments(*args, **kwargs):
        # a TypeError here is the page calling run_experiments with the wrong arguments
        inspect.signature(REAL_RUN_EXPERIMENTS).bind(*args, **kwargs)
        calls.append((args, kwargs))
        return REAL_RUN_EXPERIMENTS(*args, **dict(kwargs, dry_run=True))

    monkeypatch.setattr(rlfast.launching, "run_experiments", checked_run_experiments)
    monkeypatch.chdir(ROOT)  # the snippets name their scripts relative to the checkout
    monkeypatch.setenv("RLFAST_DATA_DIR", str(tmp_path))
    exec(compile(snippet, path, "exec"), {"__name__": "readme_snippet"})
    assert len(calls) == 1
    out = capsys.readouterr().out
    assert "[dry run]" in out and str(tmp_path) in out
    assert not any(tmp_path.iterdir())  # a dry run writes nothing


def test_inline_run_experiments_calls_use_its_keywords():
    spans = [(path, span) for path, text in DOCS.items()
             for span in inline_calls(text, "run_experiments")]
    assert spans, "the sweeps guide's Slurm section shows run_experiments(..., backend='slurm')"
    parameters = inspect.signature(REAL_RUN_EXPERIMENTS).parameters
    for path, span in spans:
        call = ast.parse(span, mode="eval").body
        assert isinstance(call, ast.Call), f"{path}: {span}"
        for keyword in call.keywords:
            assert keyword.arg in parameters, f"{keyword.arg!r} in {path}'s `{span}`"
            if keyword.arg == "slurm" and isinstance(keyword.value, ast.Call):
                for option in keyword.value.keywords:
                    assert option.arg in SLURM_KEYS, \
                        f"slurm option {option.arg!r}: {path}'s `{span}`"


def test_default_run_prints_the_lines_the_first_run_page_names(tmp_path, capsys):
    """docs/getting-started/first-run.md: a first line (device, sampler, log dir), the column
    header, one row per evaluation, ``Logs: DIR`` and the final return line."""
    page = DOCS[FIRST_RUN]
    assert "one row per evaluation" in page and "`Logs: DIR`" in page
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


TABLE_START = "<!-- results-table: python scripts/reproduce.py --table -->"
TABLE_END = "<!-- /results-table -->"


def _results_table(text: str) -> str:
    start, end = text.index(TABLE_START), text.index(TABLE_END)
    return text[start:end]


def test_the_site_front_page_shows_the_readme_results_table():
    """docs/index.md shows the README's results table (which ``scripts/reproduce.py --page``
    writes): either included from the README's ``results-table`` snippet section, or as an
    identical copy between the same markers (copy the README's block after --page)."""
    readme, index = DOCS["README.md"], DOCS["docs/index.md"]
    table = _results_table(readme)
    assert table.count("\n|") >= 3, "the README's results table has a header and rows"
    if '--8<-- "README.md:results-table"' in index:
        section = readme[readme.index("[start:results-table]"):readme.index("[end:results-table]")]
        assert table in section
    else:
        assert _results_table(index) == table, (
            "docs/index.md's results table differs from the README's: copy the README's block "
            "between the results-table markers into docs/index.md")
    assert "](results/" in index and ".png)" in index  # with one picture
