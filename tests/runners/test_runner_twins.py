"""The synchronous and asynchronous runners repeat no method: no method body of a class in
``minibatch_rl.py`` or ``sync_rl.py`` is the body of a method of a class in ``async_rl.py``
(compared as syntax trees, after the docstring; an empty body, an abstract declaration or a
hook that does nothing, is no code to repeat). What they have alike is written once, in
``rlfast.runners.common``, and both families hold the same function."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from rlfast.runners import (AsyncRl, AsyncRlBase, AsyncRlEval, MinibatchRl, MinibatchRlBase,
                            MinibatchRlEval, common)

RUNNERS = Path(common.__file__).resolve().parent
SYNC_FILES = ("minibatch_rl.py", "sync_rl.py")
ASYNC_FILES = ("async_rl.py",)
# The members issue 53 found written twice, with the same or nearly the same bodies.
SHARED = ("n_itr", "itr_batch_size", "get_traj_info_kwargs", "save_itr_snapshot",
          "resume_from", "runner_state", "load_runner_state", "final_result")


def method_bodies(source: str) -> dict[str, str]:
    """``{"Class.method": body}`` of every method of every top-level class in ``source``,
    the body as an AST dump (no positions, no comments) without its docstring; methods
    whose body is only a docstring are left out."""
    bodies = {}
    for node in ast.parse(source).body:
        if not isinstance(node, ast.ClassDef):
            continue
        for item in node.body:
            if not isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            body = item.body
            first = body[0] if body else None
            if (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
                    and isinstance(first.value.value, str)):
                body = body[1:]
            if body:
                bodies[f"{node.name}.{item.name}"] = ast.dump(ast.Module(body=body,
                                                                         type_ignores=[]))
    return bodies


def repeated(sources_a: list[str], sources_b: list[str]) -> list[tuple[str, str]]:
    """The pairs (method of a class in ``sources_a``, method of a class in ``sources_b``)
    with the same body."""
    a = {k: v for s in sources_a for k, v in method_bodies(s).items()}
    b = {k: v for s in sources_b for k, v in method_bodies(s).items()}
    return sorted((name_a, name_b) for name_a, body_a in a.items()
                  for name_b, body_b in b.items() if body_a == body_b)


def _read(names: tuple[str, ...]) -> list[str]:
    return [(RUNNERS / name).read_text() for name in names]


def test_sync_and_async_runners_repeat_no_method_body():
    sync, asynchronous = _read(SYNC_FILES), _read(ASYNC_FILES)
    assert len(method_bodies("\n".join(sync))) >= 12  # the parse sees the runners' methods
    assert len(method_bodies(asynchronous[0])) >= 12
    twins = "\n  ".join(f"{a} == {b}" for a, b in repeated(sync, asynchronous))
    assert not twins, (f"method bodies written in both runner families (share them in "
                       f"rlfast/runners/common.py):\n  {twins}")


def test_the_check_finds_a_repeated_body_whatever_its_name_and_docstring():
    sync = '''
class Sync:
    def final_result(self):
        """The summary."""
        return self.diagnostics.result(self.itrs_done)

    def hook(self):
        """Does nothing."""
'''
    asynchronous = '''
class Async:
    def summary(self):
        """Another docstring, another name: the same code."""
        # a comment is no difference either
        return self.diagnostics.result(
            self.itrs_done)

    def hook(self):
        """Does nothing either: an empty hook is not a repeated body."""

    def other(self):
        return self.diagnostics.result(self.itrs_done + 1)
'''
    assert repeated([sync], [asynchronous]) == [("Sync.final_result", "Async.summary")]


@pytest.mark.parametrize("name", SHARED)
def test_what_both_runner_families_have_is_written_once(name):
    member = vars(common)[name]
    assert vars(MinibatchRlBase)[name] is member
    assert vars(AsyncRlBase)[name] is member


def test_each_runner_names_its_tracking_and_stop_return_needs_evaluations():
    assert MinibatchRl.tracking_cls is AsyncRl.tracking_cls
    assert MinibatchRlEval.tracking_cls is AsyncRlEval.tracking_cls
    assert MinibatchRl.write_row is AsyncRl.log_and_snapshot is common.write_window_row
    with pytest.raises(TypeError, match="MinibatchRl: stop_return=1.0 needs evaluations"):
        MinibatchRl(algo=None, agent=None, sampler=None, n_steps=10, stop_return=1.0)
    with pytest.raises(ValueError, match="log_traj_window"):
        MinibatchRlEval(algo=None, agent=None, sampler=None, n_steps=10, log_traj_window=0)
    runner = MinibatchRlEval(algo=None, agent=None, sampler=None, n_steps=10, stop_return=3,
                             log_traj_window=7)
    assert (runner.stop_return, runner.log_traj_window) == (3.0, 7)
    assert runner.new_tracking().train_window.maxlen == 7
