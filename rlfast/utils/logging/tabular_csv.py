"""A CSV file of diagnostics that keeps its columns aligned as new keys appear.

Runs often record a diagnostic for the first time several iterations in (e.g. the first
completed trajectory). A plain ``csv.DictWriter`` fixed to the first row's keys would
either crash or silently drop that column. ``TabularCsvFile`` instead rewrites the file
once with the expanded header (old rows get empty cells) and carries on appending, and
flushes after every row so a crashed run keeps all progress up to its last log.
"""
from __future__ import annotations

import csv
import os
from collections.abc import Mapping
from typing import Any

from rlfast.utils.logging.serialization import atomic_write

__all__ = ["TabularCsvFile", "to_cell"]


def to_cell(value: Any) -> Any:
    """Convert a recorded value to what should appear in a CSV cell.

    numpy scalars and 0-d tensors are unwrapped to Python numbers (so they print as
    ``1.5`` rather than ``np.float64(1.5)``), ``None`` becomes an empty cell and
    everything else is kept for ``csv`` to ``str()``.
    """
    if value is None:
        return ""
    item = getattr(value, "item", None)
    if callable(item) and getattr(value, "ndim", None) == 0:
        try:
            return item()
        except (TypeError, ValueError, RuntimeError):
            return value
    return value


class TabularCsvFile:
    """One CSV output: header from the first row, expanded in place when keys appear.

    The file is truncated when opened (one file per run, as in rllab), unless ``append``:
    then the rows already in it are kept and new rows continue them under the same header
    (a resumed run). ``keep_row`` (with ``append``): a predicate on each existing row (a
    dict of strings); the rows it rejects, logged after the snapshot a run resumes from and
    so about to be redone, are dropped in one atomic rewrite. Later rows missing some header
    keys get empty cells; rows with new keys trigger an atomic rewrite of the file with the
    union of the keys (in first-seen order).
    """

    def __init__(self, path: str | os.PathLike, append: bool = False, keep_row: Any = None):
        self.path = os.path.abspath(os.fspath(path))
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        self.fieldnames: list[str] = []
        self.dropped_rows = 0
        if append and os.path.isfile(self.path):
            with open(self.path, "r", newline="", encoding="utf-8") as f:
                reader = csv.DictReader(f)
                rows = list(reader)
                self.fieldnames = list(reader.fieldnames or [])
            kept = rows if keep_row is None else [r for r in rows if keep_row(r)]
            self.dropped_rows = len(rows) - len(kept)
            if self.dropped_rows:
                self._rewrite(self.fieldnames, kept)
            self._file = open(self.path, "a", newline="", encoding="utf-8")
        else:
            self._file = open(self.path, "w", newline="", encoding="utf-8")

    @property
    def closed(self) -> bool:
        return self._file.closed

    def write_row(self, row: Mapping[str, Any]) -> None:
        """Append one row (a mapping from column name to value) and flush it to disk."""
        if self._file.closed:
            raise ValueError(f"CSV output {self.path!r} is closed; cannot write a row.")
        row = {str(k): to_cell(v) for k, v in row.items()}
        new_keys = [k for k in row if k not in self.fieldnames]
        if not self.fieldnames:
            self.fieldnames = list(row)
            csv.DictWriter(self._file, fieldnames=self.fieldnames).writeheader()
        elif new_keys:
            self._expand_header(new_keys)
        writer = csv.DictWriter(self._file, fieldnames=self.fieldnames, restval="")
        writer.writerow(row)
        self._file.flush()

    def _expand_header(self, new_keys: list[str]) -> None:
        """Rewrite the file with ``new_keys`` appended to the header, then reopen it."""
        self._file.flush()
        self._file.close()
        with open(self.path, "r", newline="", encoding="utf-8") as f:
            old_rows = list(csv.DictReader(f))
        fieldnames = self.fieldnames + new_keys
        try:
            self._rewrite(fieldnames, old_rows)
        finally:
            self._file = open(self.path, "a", newline="", encoding="utf-8")
        self.fieldnames = fieldnames

    def _rewrite(self, fieldnames: list[str], rows: list[dict]) -> None:
        """Atomically replace the file with ``fieldnames`` and ``rows``."""

        def write_all(f):
            writer = csv.DictWriter(f, fieldnames=fieldnames, restval="")
            writer.writeheader()
            for old in rows:
                writer.writerow({k: ("" if v is None else v) for k, v in old.items()
                                 if k is not None})

        atomic_write(self.path, write_all, binary=False)

    def close(self) -> None:
        if not self._file.closed:
            self._file.flush()
            self._file.close()
