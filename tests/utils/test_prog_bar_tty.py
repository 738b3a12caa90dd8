"""The progress bar in a real terminal: once a bar ends, nothing of it stays on the screen.

pyprind's finish prints a full bar and a "Total time elapsed" line, which a pipe hides (the
runners draw no bar there) but a terminal shows between every two log rows. These tests run
the bar, and a small ``rlfast train``, on a pseudo-terminal, read back the bytes the
terminal received and replay them through a tiny terminal model (carriage return, newline,
backspace and the erase-line sequences), then look at what is left on the screen.
"""
from __future__ import annotations

import errno
import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time

from rlfast.utils.prog_bar import ProgBarCounter

_CSI = re.compile(r"\x1b\[([0-9;?]*)([A-Za-z])")
_ROW = re.compile(r"^\s+[\d,]+\s+(-|[\d,]+)\s")  # steps, then SPS, right-aligned


def screen(text: str) -> list[str]:
    """The lines a terminal shows after receiving ``text``: printable characters overwrite
    the cell under the cursor; ``\\r`` returns to column 0, ``\\n`` moves down a line,
    ``\\b`` back a column; ``ESC [ K`` / ``ESC [ 0 K`` clear to the end of the line,
    ``ESC [ 1 K`` to its start and ``ESC [ 2 K`` the whole line; colours (``ESC [ ... m``)
    change nothing on the grid. Any other escape sequence fails the test, so that output
    this model cannot replay is not mistaken for a clean screen."""
    lines: list[list[str]] = [[]]
    row = col = 0
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\x1b":
            m = _CSI.match(text, i)
            assert m is not None, f"unknown escape sequence at {text[i:i + 10]!r}"
            arg, final = m.groups()
            line = lines[row]
            if final == "K" and arg in ("", "0"):
                del line[col:]
            elif final == "K" and arg == "1":
                line[:col + 1] = [" "] * min(col + 1, len(line))
            elif final == "K" and arg == "2":
                line.clear()
            elif final != "m":
                raise AssertionError(f"escape sequence {m.group(0)!r} is not modelled")
            i = m.end()
            continue
        if ch == "\r":
            col = 0
        elif ch == "\n":
            row += 1
            if row == len(lines):
                lines.append([])
        elif ch == "\b":
            col = max(col - 1, 0)
        else:
            line = lines[row]
            line.extend(" " * (col - len(line)))
            if col < len(line):
                line[col] = ch
            else:
                line.append(ch)
            col += 1
        i += 1
    return ["".join(line).rstrip() for line in lines]


def test_screen_model_replays_overwrites_and_erases():
    assert screen("abc\rX") == ["Xbc"]
    assert screen("abcdef\r\x1b[2Kxy\r\n") == ["xy", ""]
    assert screen("abcdef\rab\x1b[K\r\nz") == ["ab", "z"] and screen("ab\ncd") == ["ab", "  cd"]
    assert screen("abcdef\r\x1b[1Kz") == ["zbcdef"] and screen("abc\x1b[1K") == [""]
    assert screen("ab\bX\x1b[31mc\x1b[0m") == ["aXc"]


def _open_pty(columns: int = 100) -> tuple[int, int]:
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    return master, slave


def _read_all(master: int, proc: subprocess.Popen | None, timeout: float) -> str:
    """Everything written to the pty until its last writer closed it (EIO on Linux)."""
    chunks = []
    deadline = time.monotonic() + timeout
    while True:
        assert time.monotonic() < deadline, "the command did not finish in time"
        ready, _, _ = select.select([master], [], [], 0.5)
        if not ready:
            if proc is None:
                break
            continue
        try:
            data = os.read(master, 65536)
        except OSError as e:
            if e.errno != errno.EIO:
                raise
            break
        if not data:
            break
        chunks.append(data)
    return b"".join(chunks).decode("utf-8", errors="replace")


def test_finished_bar_leaves_nothing_on_the_terminal(monkeypatch):
    master, slave = _open_pty()
    stream = open(slave, "w", buffering=1, closefd=True)
    try:
        monkeypatch.setattr(sys, "stderr", stream)
        for counts in ([1, 2, 3], [1, 2, 3, 4]):  # stopped before full; filled to the end
            bar = ProgBarCounter(4)
            for c in counts:
                bar.update(c)
            bar.stop()
            stream.write("row\n")
        stream.flush()
        raw = _read_all(master, None, timeout=10)
    finally:
        monkeypatch.undo()
        stream.close()
        os.close(master)
    assert "ETA:" in raw  # the bar was drawn on the terminal
    assert screen(raw) == ["row", "row", ""]


def test_bar_on_a_file_ends_its_line_without_escapes(capfd):
    bar = ProgBarCounter(4)
    bar.update(2)
    bar.stop()
    err = capfd.readouterr().err
    assert "ETA:" in err and err.endswith("\n")
    assert "\x1b" not in err and "Total time elapsed" not in err


def test_train_in_a_terminal_prints_only_rows_between_rows(tmp_path):
    """``rlfast train`` on a pseudo-terminal (stdin, stdout and stderr, as in a shell): the
    bar is drawn between rows, and the screen shows the header, then the rows one after
    another with no bar, ETA or elapsed-time line left between them."""
    master, slave = _open_pty()
    cmd = [sys.executable, "-m", "rlfast", "train", "ppo", "CartPole-v1", "--steps", "512",
           "--sampler", "serial", "--n-envs", "2", "--log-dir", str(tmp_path / "run"),
           "--set", "sampler.batch_T=64", "--set", "runner.log_interval_steps=256",
           "--set", "sampler.eval_max_steps=400"]
    env = dict(os.environ, COLUMNS="100", TERM="xterm")
    try:
        proc = subprocess.Popen(cmd, cwd=tmp_path, stdin=slave, stdout=slave, stderr=slave,
                                env=env, start_new_session=True)
        os.close(slave)
        slave = -1
        raw = _read_all(master, proc, timeout=180)
        assert proc.wait(timeout=60) == 0, raw
    finally:
        if slave >= 0:
            os.close(slave)
        os.close(master)
    assert "ETA:" in raw, raw  # a bar was drawn between the rows
    lines = screen(raw)
    header = next(i for i, line in enumerate(lines) if line.split()[:2] == ["steps", "SPS"])
    logs = next(i for i, line in enumerate(lines) if line.startswith("Logs: "))
    rows = lines[header + 1:logs]
    assert [row.split()[0] for row in rows] == ["0", "256", "512"], "\n".join(lines)
    assert all(_ROW.match(row) for row in rows), "\n".join(lines)
    for line in lines:
        assert "ETA:" not in line and "Total time elapsed" not in line, "\n".join(lines)
