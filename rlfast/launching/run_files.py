"""The files a sweep writes beside its runs: ``experiments_tree.txt`` and
``num_launched.txt`` in the experiment directory (so a sweep can be watched from another
terminal), and each run's ``run_<ID>.stdout.txt`` / ``.stderr.txt`` in its log directory.
"""
from __future__ import annotations

import os
from collections.abc import Sequence

__all__ = ["NUM_LAUNCHED_FILE", "TREE_FILE", "write_atomic", "tree_text", "run_output_stem",
           "stderr_tail", "write_tree_file"]

NUM_LAUNCHED_FILE = "num_launched.txt"
TREE_FILE = "experiments_tree.txt"


def write_atomic(path: str, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` through a temporary file and ``os.replace``, so a
    reader sees the old file or the new one, never a partial write."""
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def tree_text(experiment_title: str, log_dirs: Sequence[str]) -> str:
    """Indented tree of the variant directories under the experiment directory."""
    lines = [f"{experiment_title}/"]
    seen: set[tuple[str, ...]] = set()
    for log_dir in log_dirs:
        parts = tuple(p for p in os.path.normpath(log_dir).split(os.sep) if p not in ("", "."))
        for depth in range(1, len(parts) + 1):
            if parts[:depth] not in seen:
                seen.add(parts[:depth])
                lines.append("    " * depth + parts[depth - 1] + "/")
    return "\n".join(lines) + "\n"


def run_output_stem(log_dir: str, run_ID: int) -> str:
    """``log_dir/run_<run_ID>``: add ``.stdout.txt`` or ``.stderr.txt`` for a run's output."""
    return os.path.join(log_dir, f"run_{run_ID}")


def stderr_tail(log_dir: str, run_ID: int, n_lines: int = 5) -> str:
    """The last ``n_lines`` of a run's stderr file, each on its own indented ``| `` line
    (empty when the file cannot be read): the end of a failure report."""
    try:
        with open(f"{run_output_stem(log_dir, run_ID)}.stderr.txt", "r", encoding="utf-8",
                  errors="replace") as f:
            tail = f.read().splitlines()[-n_lines:]
    except OSError:
        return ""
    return "".join(f"\n    | {line}" for line in tail)


def write_tree_file(exp_dir: str, header: str, experiment_title: str,
                    log_dirs: Sequence[str]) -> None:
    """Create ``exp_dir`` and write its ``experiments_tree.txt``: ``header`` (how the sweep
    runs), the launcher's pid and the tree of the variant directories."""
    os.makedirs(exp_dir, exist_ok=True)
    write_atomic(os.path.join(exp_dir, TREE_FILE),
                 f"{header}\nlauncher pid: {os.getpid()}\n\n"
                 + tree_text(experiment_title, log_dirs))
