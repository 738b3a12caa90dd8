"""A file that is not an rlfast snapshot: one clear line naming it, without torch's advice.

torch's weights-only unpickler explains its refusals in paragraphs written for its own users
("Please file an issue ...", "Re-running torch.load with weights_only set to False will
likely succeed ..."); ``load_snapshot`` turns every such failure into one line that names the
file, says it is not a valid rlfast snapshot and keeps only torch's reason, and ``rlfast
eval`` / ``rlfast export`` print that line alone."""
from __future__ import annotations

import collections
import os
import pickle
import warnings

import pytest
import torch

from rlfast.cli import main
from rlfast.utils.logging import SnapshotCorruptError, load_snapshot
from tests._tiny_run import train_tiny_run

BAD_FILES = {
    "text": b"not a snapshot at all\n",
    "bytes": bytes(range(256)) * 8,
    "pickle-protocol-4": pickle.dumps({"a": collections.Counter("ab")}, protocol=4),
    "pickle-of-a-function": pickle.dumps(os.getcwd, protocol=2),
    "zip-header": b"PK\x03\x04" + bytes(60),
}
TORCH_ADVICE = ("file an issue", "weights_only` set to `False", "arbitrary code execution",
                "Check the documentation", "\x1b")


def _check_line(message: str, path) -> None:
    assert "\n" not in message, message
    assert message.startswith(f"{path} is not a valid rlfast snapshot: "), message
    for advice in TORCH_ADVICE:
        assert advice not in message, message


@pytest.mark.parametrize("name", sorted(BAD_FILES))
def test_bad_file_is_one_line_naming_it(tmp_path, name):
    path = tmp_path / f"{name}.pkl"
    path.write_bytes(BAD_FILES[name])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing on stderr but the error
        with pytest.raises(SnapshotCorruptError) as caught:
            load_snapshot(path)
    _check_line(str(caught.value), path)


def test_refused_code_keeps_torchs_reason(tmp_path):
    class RunsCode:
        def __reduce__(self):
            return (print, ("ran code while loading",))

    path = tmp_path / "evil.pkl"
    torch.save({"w": torch.ones(1), "x": RunsCode()}, path)
    with pytest.raises(SnapshotCorruptError) as caught:
        load_snapshot(path)
    _check_line(str(caught.value), path)
    assert "Unsupported global: GLOBAL print was not an allowed global" in str(caught.value)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    return train_tiny_run(tmp_path_factory.mktemp("run"))


@pytest.mark.parametrize("command", [["eval"], ["export", "--format", "torchscript"]])
def test_cli_prints_the_one_line(run_dir, tmp_path, capsys, command):
    bad = tmp_path / "garbage.pkl"
    bad.write_bytes(BAD_FILES["bytes"])
    capsys.readouterr()
    assert main([command[0], str(run_dir), "--snapshot", str(bad), *command[1:]]) == 2
    captured = capsys.readouterr()
    (line,) = captured.err.splitlines()
    prefix = line[:line.index(str(bad))]
    assert prefix in ("rlfast: error: ", "rlfast export: error: "), line
    _check_line(line[len(prefix):], bad)
    assert captured.out == ""
