"""What a sweep returns and prints at its end: one :data:`RunResult` per run, the summary of
the failed runs, and :func:`report_sweep` for launch scripts."""
from __future__ import annotations

import sys
from collections import namedtuple
from collections.abc import Callable, Sequence

__all__ = ["RunResult", "print_failures", "report_sweep"]

RunResult = namedtuple("RunResult", ["log_dir", "run_ID", "slot", "returncode"])
RunResult.__doc__ = ("One run of a sweep: its variant log dir, run_ID, run slot and exit code "
                     "(None when planned in a dry run and not started).")


def print_failures(failed: Sequence[RunResult], total: int,
                   describe: Callable[[RunResult], str]) -> None:
    """On stderr, when any run failed: ``N of TOTAL runs failed:`` and one ``describe(run)``
    line per failed run."""
    if not failed:
        return
    print(f"{len(failed)} of {total} runs failed:", file=sys.stderr)
    for result in failed:
        print(f"  {describe(result)}", file=sys.stderr, flush=True)


def report_sweep(results: Sequence[RunResult], exp_dir: str) -> int:
    """Print how many runs of a finished sweep succeeded and the command that plots and
    tabulates them; return a launch script's exit status (1 when any run failed)."""
    failed = [r for r in results if r.returncode != 0]
    print(f"\n{len(results) - len(failed)} of {len(results)} runs succeeded. Results:\n"
          f"  rlfast plot {exp_dir}", flush=True)
    return 1 if failed else 0
