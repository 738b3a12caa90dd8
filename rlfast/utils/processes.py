"""The one process supervisor: start, watch and stop child processes.

Every multi-process part of rlfast (sampler workers today; the asynchronous sampler and the
DDP ranks build on it too) starts its children through :class:`ProcessSupervisor`:

- children start with one chosen start method (``fork`` where the OS has it);
- each child gets one duplex pipe; the parent closes the child ends and each child closes the
  parent ends, so the death of either side shows up on the other as end-of-file;
- :meth:`ProcessSupervisor.gather` blocks in ``multiprocessing.connection.wait`` on the
  pipes *and* the process sentinels together, so a child that raises (its traceback arrives on
  the pipe, see :func:`child_main`) or dies outright (its sentinel fires) becomes an error in
  the parent at once, never a hang; with a :class:`Deadline`, a child that is alive but silent
  (stopped, deadlocked, stuck in a call) becomes an error too, naming the child and, through
  the caller's ``describe``, what it was doing;
- :meth:`ProcessSupervisor.stop` asks every child to quit, joins them all within one shared
  ``join_s``, then terminates and kills stragglers; a stopped (SIGSTOP) child, which can read
  nothing, is terminated and continued as soon as it is seen stopped during that wait. It
  runs on every exit path, and a ``weakref.finalize`` runs it when the owner is dropped
  without calling it (or at interpreter exit);
- in a child, SIGTERM (from :meth:`ProcessSupervisor.stop`, or from a job scheduler signalling
  the whole process group) raises :class:`StopChild`: the child leaves quietly, without a
  traceback.
"""
from __future__ import annotations

import gc
import multiprocessing as mp
import os
import signal
import time
import traceback
import weakref
from multiprocessing.connection import wait as wait_connections
from typing import Any, Callable, NoReturn, Sequence

__all__ = ["ChildFailedError", "StopChild", "ProcessSupervisor", "Deadline", "mp_context",
           "child_main", "acquire_while_parent_alive", "receive_command"]

QUIT = ("quit",)


class ChildFailedError(RuntimeError):
    """A supervised child process raised or died; the message carries its traceback."""


class StopChild(BaseException):
    """Raised inside a child to leave quietly (its parent is shutting it down, or SIGTERM).

    A ``BaseException``, like ``SystemExit``: an environment's ``except Exception`` must not
    swallow a shutdown request.
    """


class Deadline:
    """When a wait on a child gives up: ``seconds`` from now, or never (``seconds=None``).

    ``reason`` says how ``seconds`` was chosen and how to change it; it ends the error message
    of a child that stayed silent past the deadline.
    """

    def __init__(self, seconds: float | None = None, reason: str = ""):
        if seconds is not None and seconds < 0:
            raise ValueError(f"a deadline needs seconds >= 0 or None (never); got {seconds!r}")
        self.seconds = None if seconds is None else float(seconds)
        self.reason = reason
        self._at = None if seconds is None else time.monotonic() + float(seconds)

    @classmethod
    def of(cls, timeout: "Deadline | float | None") -> "Deadline":
        """``timeout`` itself when it is a Deadline, else a Deadline of ``timeout`` seconds."""
        return timeout if isinstance(timeout, Deadline) else cls(timeout)

    def remaining(self) -> float | None:
        """Seconds left (0 once passed), or None when there is no deadline."""
        if self._at is None:
            return None
        return max(0.0, self._at - time.monotonic())

    def expired(self) -> bool:
        """True once the deadline has passed (never without one)."""
        return self._at is not None and time.monotonic() >= self._at

    def wait_s(self, poll_s: float) -> float:
        """How long one bounded wait may block: ``poll_s``, or less when the deadline is near."""
        remaining = self.remaining()
        return poll_s if remaining is None else min(poll_s, remaining)

    def __repr__(self) -> str:
        return f"Deadline({self.seconds!r}, {self.reason!r})"


def mp_context(start_method: str | None = None):
    """The multiprocessing context for ``start_method`` (default: fork where available)."""
    methods = mp.get_all_start_methods()
    if start_method is None:
        start_method = "fork" if "fork" in methods else methods[0]
    if start_method not in methods:
        raise ValueError(f"start method {start_method!r} is not available here; "
                         f"choose one of {methods}")
    return mp.get_context(start_method)


def _stop_on_sigterm(signum, frame) -> NoReturn:
    raise StopChild(f"signal {signum} received")


def child_main(target: Callable, conn, parent_conns: Sequence, kwargs: dict) -> None:
    """Entry point of every supervised child: run ``target(conn, **kwargs)``.

    Closes the parent's pipe ends first (so the parent's death reads as EOF here). SIGTERM
    raises :class:`StopChild` while ``target`` runs (then ends the child silently), so that a
    scheduler signalling the whole process group gets quiet workers. Any exception, except
    :class:`StopChild`, is sent to the parent as ``("error", traceback)`` before the child
    exits; the pipe is closed on every path.
    """
    for parent_end in parent_conns:
        parent_end.close()
    try:
        signal.signal(signal.SIGTERM, _stop_on_sigterm)
        try:
            target(conn, **kwargs)
        finally:
            # From here on SIGTERM ends the child at once and silently (default action).
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
    except StopChild:
        pass
    except BaseException:  # noqa: BLE001 - every failure must reach the parent
        try:
            conn.send(("error", traceback.format_exc()))
        except (OSError, ValueError):
            pass  # the parent is gone; nobody to tell
    finally:
        conn.close()


def receive_command(conn) -> tuple | None:
    """A child's next command from its parent, or None when the parent said quit or is
    gone (end-of-file on the pipe): the child's serving loop then ends."""
    try:
        message = conn.recv()
    except EOFError:
        return None
    return None if message[0] == "quit" else message


def acquire_while_parent_alive(semaphore, parent_pid: int, stop_flag=None,
                               poll_s: float = 1.0) -> None:
    """In a child: block on ``semaphore``; raise :class:`StopChild` when ``stop_flag`` is set
    (the parent is shutting down) and ``RuntimeError`` when the parent has gone away."""
    while not semaphore.acquire(timeout=poll_s):
        if stop_flag is not None and stop_flag.value:
            raise StopChild("the parent is shutting down")
        if os.getppid() != parent_pid:
            raise RuntimeError("the parent process exited; child stopping")


def _process_status(pid: int) -> str:
    """The OS's status of process ``pid`` ("running", "sleeping", "stopped", ...)."""
    try:
        import psutil
        return str(psutil.Process(pid).status())
    except Exception:  # noqa: BLE001 - psutil missing or the process gone: unknown
        return "unknown"


def _is_stopped(pid: int) -> bool:
    return _process_status(pid) in ("stopped", "tracing-stop")


def _terminate(process) -> None:
    """SIGTERM, then SIGCONT: a stopped process receives the pending SIGTERM on continuing.

    Only a child not yet reaped is signalled (its pid cannot have been reused)."""
    if not process.is_alive():
        return
    process.terminate()
    try:
        os.kill(process.pid, signal.SIGCONT)
    except ProcessLookupError:
        pass  # it exited meanwhile (a zombie until joined)


def _join_all(processes: list, seconds: float) -> None:
    """Join every process within one shared ``seconds`` (not ``seconds`` each)."""
    deadline = time.monotonic() + seconds
    for p in processes:
        p.join(timeout=max(0.0, deadline - time.monotonic()))


def _join_watching_stopped(processes: list, seconds: float, signalled: set,
                           poll_s: float = 0.1) -> None:
    """Join every process within one shared ``seconds``; a child found stopped meanwhile is
    terminated and continued at once instead of costing the rest of ``seconds``.

    Watching for the whole wait, not once before it, matters: a SIGSTOP sent just before
    :func:`_stop` may not have taken effect yet when the child is first looked at.
    ``signalled`` holds the pids already terminated (and is updated)."""
    deadline = time.monotonic() + seconds
    while True:
        alive = [p for p in processes if p.is_alive()]
        remaining = deadline - time.monotonic()
        if not alive or remaining <= 0:
            return
        for p in alive:
            if p.pid not in signalled and _is_stopped(p.pid):
                _terminate(p)
                signalled.add(p.pid)
        wait_connections([p.sentinel for p in alive], timeout=min(poll_s, remaining))


def _stop(processes: list, conns: list, stop_flags: list, join_s: float,
          terminate_first: bool = False) -> None:
    """Ask children to quit, join, then terminate / kill stragglers. Safe to call twice.

    A stopped child cannot read the request, nor act on SIGTERM until continued: it is
    terminated and continued as soon as it is seen stopped, at any point of the wait,
    instead of costing ``join_s``. With ``terminate_first`` every child gets SIGTERM at
    once (children that read no requests while they work), and ``join_s`` is their grace
    period before SIGKILL.
    """
    for flag in stop_flags:
        flag.value = True
    for conn in conns:
        try:
            conn.send(QUIT)
        except (OSError, ValueError):
            pass
    signalled: set = set()
    if terminate_first:
        for p in processes:
            if p.is_alive():
                _terminate(p)
                signalled.add(p.pid)
    _join_watching_stopped(processes, join_s, signalled)
    stragglers = [p for p in processes if p.is_alive()]
    for p in stragglers:
        _terminate(p)
    _join_all(stragglers, 2.0)
    for p in stragglers:
        if p.is_alive():
            p.kill()
            p.join()
    for conn in conns:
        conn.close()
    processes.clear()
    conns.clear()


class ProcessSupervisor:
    """Starts children that each serve requests over one pipe, and watches them.

    ``label`` names a child in errors (``"Sampler worker 3 (pid 123) raised: ..."``);
    ``error_cls`` is the exception raised for a failed child. ``stop_flags`` are shared
    boolean values set on stop, which release children blocked on something other than
    their pipe (see :func:`acquire_while_parent_alive`). ``terminate_first``: children
    that read no requests while they work (training ranks) get SIGTERM as soon as they are
    stopped, ``join_s`` being their grace period.
    """

    def __init__(self, label: str = "Child", error_cls: type = ChildFailedError,
                 start_method: str | None = None, stop_flags: Sequence = (),
                 join_s: float = 5.0, names: Sequence[str] | None = None,
                 terminate_first: bool = False):
        self.label = label
        self.names = None if names is None else list(names)  # per child, instead of "label i"
        self.error_cls = error_cls
        self.ctx = mp_context(start_method)
        self.processes: list = []
        self.conns: list = []
        self.stop_flags = list(stop_flags)
        self.join_s = float(join_s)
        self.terminate_first = bool(terminate_first)
        self._finalizer = None

    # ---- lifecycle ----------------------------------------------------------------------
    def start(self, target: Callable, kwargs_list: Sequence[dict], name: str = "rlfast-child",
              owner: Any = None, daemon: bool = True) -> None:
        """Start one child per entry of ``kwargs_list`` running ``target(conn, **kwargs)``.

        With ``owner``, a finalizer stops the children when ``owner`` is garbage-collected
        without :meth:`stop` having been called (nothing here refers back to ``owner``).
        """
        if self.processes:
            raise RuntimeError(f"{self.label} processes already started")
        if self.ctx.get_start_method() == "fork":
            # Collect this process's garbage first: a forked child must never finalize an
            # object whose destructor needs a thread of the parent (a torch.distributed
            # process group left by an earlier run waits for it forever in the child).
            gc.collect()
        pipes = [self.ctx.Pipe(duplex=True) for _ in kwargs_list]
        self.conns.extend(parent for parent, _ in pipes)
        self._finalizer = weakref.finalize(owner if owner is not None else self, _stop,
                                           self.processes, self.conns, self.stop_flags,
                                           self.join_s, self.terminate_first)
        try:
            for i, (kwargs, (_, child)) in enumerate(zip(kwargs_list, pipes)):
                p = self.ctx.Process(target=child_main, name=f"{name}-{i}", daemon=daemon,
                                     args=(target, child, self.conns, kwargs))
                p.start()
                self.processes.append(p)
        except BaseException:
            self.stop()
            raise
        finally:
            for _, child in pipes:
                child.close()

    def stop(self) -> None:
        """Stop and join every child (terminating any that do not exit). Idempotent."""
        if self._finalizer is not None:
            self._finalizer()

    @property
    def n(self) -> int:
        return len(self.conns)

    # ---- messages -----------------------------------------------------------------------
    def send_all(self, message: tuple, indexes: Sequence[int] | None = None) -> None:
        """Send ``message`` to every child (or those in ``indexes``); a dead child's broken
        pipe is ignored here and reported by the next :meth:`gather`."""
        for i in range(self.n) if indexes is None else indexes:
            try:
                self.conns[i].send(message)
            except (OSError, ValueError):
                pass

    def gather(self, expected: str, timeout: Deadline | float | None = None,
               describe: Callable[[int], str] | None = None,
               recover: Callable[[int, str], Deadline | None] | None = None,
               indexes: Sequence[int] | None = None) -> list:
        """Block until every child (or those in ``indexes``) replied ``(expected, payload)``;
        return the payloads in child order. A child that raised or died makes this stop all
        children and raise.

        ``timeout`` (seconds, or a :class:`Deadline` shared with other waits; None waits
        forever): when it passes, the children that have not replied are named in the error
        (see :meth:`fail_silent`), with ``describe(i)`` saying what child ``i`` was doing.
        ``recover(i, cause)``, when given, is asked first about a child that raised, died or
        stayed silent (``cause`` is the error text; a silent child is terminated first): it
        may replace child ``i`` (:meth:`restart`) and send it the request again, and return
        the deadline to wait on from then on; None means it could not, and the error is
        raised as without it.
        """
        deadline = Deadline.of(timeout)
        replies: dict[int, Any] = {}
        waiting = set(range(self.n) if indexes is None else indexes)
        order = sorted(waiting)
        while waiting:
            conns = {self.conns[i]: i for i in waiting}
            sentinels = {self.processes[i].sentinel: i for i in waiting}
            ready = wait_connections(list(conns) + list(sentinels),
                                     timeout=deadline.remaining())
            if not ready:
                if deadline.expired():
                    deadline = self._silent(sorted(waiting), expected, deadline, describe,
                                            recover)
                continue
            failed: dict[int, str] = {}
            for obj in ready:
                i = conns.get(obj)
                if i is None:
                    continue
                kind, payload = self._receive(i)  # pipes first: a failing child writes, then exits
                if kind == expected:
                    replies[i] = payload
                    waiting.discard(i)
                elif kind in ("error", "died"):
                    failed[i] = payload
                else:
                    self.fail(f"{self._name(i)} replied {kind!r}, expected {expected!r}")
            for obj in ready:
                i = sentinels.get(obj)
                if i is not None and i in waiting and i not in failed and not self._has_data(i):
                    failed[i] = self._died(i)
            for i, cause in failed.items():
                deadline = self._recover_or_fail(i, cause, recover)
        return [replies[i] for i in order]

    def _receive(self, i: int) -> tuple[str, Any]:
        """One ``(kind, payload)`` from child ``i``; a traceback comes back as ``("error",
        text naming the child)``, a closed pipe as ``("died", text)``."""
        try:
            kind, payload = self.conns[i].recv()
        except (EOFError, OSError):
            return "died", self._died(i)
        if kind == "error":
            return "error", self._raised(i, payload)
        return kind, payload

    def _recover_or_fail(self, i: int, cause: str,
                         recover: Callable[[int, str], Deadline | None] | None) -> Deadline:
        """The deadline ``recover`` gives after replacing child ``i``, or stop all and raise."""
        deadline = recover(i, cause) if recover is not None else None
        if deadline is None:
            self.fail(cause)
        return deadline

    def _silent(self, indexes: Sequence[int], expected: str, deadline: Deadline,
                describe: Callable[[int], str] | None,
                recover: Callable[[int, str], Deadline | None] | None) -> Deadline:
        """Children ``indexes`` sent no ``expected`` reply before ``deadline``: each is
        terminated and offered to ``recover``; without it (or when it declines) every child
        is stopped and the error names all of them (:meth:`fail_silent`)."""
        silence = f"sent no {expected!r} reply"
        if recover is None:
            self.fail_silent(indexes, silence, deadline, describe)
        lines = self._silence_lines(indexes, silence, deadline, describe)
        new_deadline = deadline
        for i, line in zip(indexes, lines):
            _terminate(self.processes[i])
            new_deadline = self._recover_or_fail(i, line, recover)
        return new_deadline

    def _silence_lines(self, indexes: Sequence[int], silence: str, deadline: Deadline,
                       describe: Callable[[int], str] | None,
                       with_reason: bool = True) -> list[str]:
        """One line per silent child: index, pid, OS status, what it was doing (and, with
        ``with_reason``, the deadline's reason appended to each)."""
        lines = []
        for i in indexes:
            pid = self.processes[i].pid
            doing = ""
            if describe is not None:
                try:
                    doing = f"; it was {describe(i)}"
                except Exception as exc:  # noqa: BLE001 - the report must not mask the timeout
                    doing = f"; its status could not be read ({exc!r})"
            line = (f"{self._name(i)} (pid {pid}) timed out: it is alive (process status: "
                    f"{_process_status(pid)}) but {silence} within {deadline.seconds:g} s"
                    f"{doing}.")
            if with_reason and deadline.reason:
                line += f"\nTimeout of {deadline.seconds:g} s: {deadline.reason}."
            lines.append(line)
        return lines

    def restart(self, i: int, target: Callable, kwargs: dict, name: str = "rlfast-child") -> None:
        """Replace child ``i`` by a new one running ``target(conn, **kwargs)`` on a new pipe:
        the old process is terminated (killed if it does not exit) and joined first. The
        other children, and what :meth:`stop` will stop, are unchanged."""
        old = self.processes[i]
        _terminate(old)
        old.join(timeout=2.0)
        if old.is_alive():
            old.kill()
            old.join()
        # Release the old child's sentinel pipes now: the new child is forked below and would
        # otherwise inherit them, holding descriptors that no process of the run uses.
        old.close()
        self.conns[i].close()
        parent, child = self.ctx.Pipe(duplex=True)
        self.conns[i] = parent
        try:
            process = self.ctx.Process(target=child_main, name=f"{name}-{i}", daemon=True,
                                       args=(target, child, self.conns, kwargs))
            process.start()
        finally:
            child.close()
        self.processes[i] = process

    def fail_silent(self, indexes: Sequence[int], silence: str, deadline: Deadline,
                    describe: Callable[[int], str] | None = None) -> NoReturn:
        """Children ``indexes`` are alive but ``silence`` (e.g. "sent no 'done' reply") past
        ``deadline``: stop every child (the silent ones at once: they would not answer a
        request to quit), then raise ``error_cls`` naming each silent child (index, pid, OS
        status) and, with ``describe(i)``, what it was doing."""
        lines = self._silence_lines(indexes, silence, deadline, describe, with_reason=False)
        if deadline.reason:
            lines.append(f"Timeout of {deadline.seconds:g} s: {deadline.reason}.")
        for i in indexes:
            _terminate(self.processes[i])
        self.fail("\n".join(lines))

    def check_alive(self) -> None:
        """Raise (after stopping every child) if any child has exited, with its traceback
        when it sent one."""
        for i, p in enumerate(self.processes):
            if not p.is_alive():
                message = self._died(i)
                if self._has_data(i):
                    try:
                        kind, payload = self.conns[i].recv()
                        if kind == "error":
                            message = self._raised(i, payload)
                    except (EOFError, OSError):
                        pass
                self.fail(message)

    def failure(self, wait_s: float = 5.0) -> BaseException | None:
        """The error of a child that raised or died, waiting up to ``wait_s`` seconds for
        one to exit (after stopping every child), or None when all stay alive or exit
        cleanly. For a parent whose own call failed because a child did (a collective with a
        dead peer errs), so that it can raise the child's traceback instead."""
        deadline = time.monotonic() + wait_s
        while True:
            try:
                self.check_alive()
            except self.error_cls as error:
                return error
            if not any(p.is_alive() for p in self.processes) or time.monotonic() >= deadline:
                return None
            time.sleep(0.1)

    def fail(self, message: str) -> NoReturn:
        """Stop every child, then raise ``error_cls(message)``."""
        self.stop()
        raise self.error_cls(message)

    def receive(self, timeout: float | None = None) -> list[tuple[int, str, Any]]:
        """Wait up to ``timeout`` seconds (None: forever) for messages from any child; return
        ``[(child index, kind, payload), ...]``, one per child that sent one (empty on
        timeout). For children that stream messages rather than answer requests. A child
        that raised or died makes this stop every child and raise, as :meth:`gather` does."""
        conns = {conn: i for i, conn in enumerate(self.conns)}
        sentinels = {p.sentinel: i for i, p in enumerate(self.processes)}
        ready = wait_connections(list(conns) + list(sentinels), timeout=timeout)
        messages = []
        for obj in ready:
            i = conns.get(obj)
            if i is not None:
                messages.append((i, *self._read(i)))
        for obj in ready:
            i = sentinels.get(obj)
            if i is not None and not self._has_data(i) and \
                    all(m[0] != i for m in messages):
                self.fail(self._died(i))
        return messages

    def poll(self, timeout: float | None = None,
             indexes: set[int] | None = None) -> list[tuple[int, str, Any]]:
        """Wait up to ``timeout`` seconds (None: forever) for messages from the children in
        ``indexes`` (default: all); return ``[(child index, kind, payload), ...]``. Unlike
        :meth:`receive`, nothing is raised and nothing stopped: a child's traceback comes
        back as ``("error", traceback)`` and a death without one as ``("died", message)``,
        for a caller that gathers several failures before deciding which one to report. A
        child reported failed keeps being reported: leave it out of ``indexes``."""
        watched = set(range(self.n)) if indexes is None else set(indexes)
        conns = {self.conns[i]: i for i in watched}
        sentinels = {self.processes[i].sentinel: i for i in watched}
        ready = wait_connections(list(conns) + list(sentinels), timeout=timeout)
        messages, heard = [], set()
        for obj in ready:
            i = conns.get(obj)
            if i is not None:
                try:
                    kind, payload = self.conns[i].recv()
                except (EOFError, OSError):
                    kind, payload = "died", self._died(i)
                messages.append((i, kind, payload))
                heard.add(i)
        for obj in ready:
            i = sentinels.get(obj)
            if i is not None and i not in heard and not self._has_data(i):
                messages.append((i, "died", self._died(i)))
        return messages

    # ---- helpers ------------------------------------------------------------------------
    def _read(self, i: int) -> tuple[str, Any]:
        """One ``(kind, payload)`` message from child ``i``; an ``("error", traceback)`` or
        a closed pipe stops every child and raises."""
        try:
            kind, payload = self.conns[i].recv()
        except (EOFError, OSError):
            self.fail(self._died(i))
        if kind == "error":
            self.fail(self._raised(i, payload))
        return kind, payload

    def _name(self, i: int) -> str:
        return self.names[i] if self.names is not None else f"{self.label} {i}"

    def _has_data(self, i: int) -> bool:
        try:
            return self.conns[i].poll(0)
        except (OSError, EOFError):
            return False

    def _died(self, i: int) -> str:
        p = self.processes[i]
        p.join(timeout=1)
        return f"{self._name(i)} died (exit code {p.exitcode}) without a Python traceback"

    def _raised(self, i: int, payload: str) -> str:
        return f"{self._name(i)} (pid {self.processes[i].pid}) raised:\n{payload}"
