"""``rlfast export`` prints its result line and nothing else unless something is wrong.

torch.onnx's exporter logs four lines at every export ("torchvision is not installed.
Skipping torchvision::nms", ...) and torch warns about its own internals; the export drops
exactly those, around the export call only. An output path that cannot be written is
refused before any work, named as the user gave it, and a failed write leaves no file."""
from __future__ import annotations

import logging
import os
import subprocess
import sys
import warnings

import pytest

from rlfast.cli import main
from rlfast.experiments import export as export_module
from tests._tiny_run import train_tiny_run

_REGISTRATION_LOGGER = "torch.onnx._internal.exporter._registration"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    return train_tiny_run(tmp_path_factory.mktemp("run"))


def test_onnx_export_prints_only_its_result(run_dir, tmp_path):
    """A real process, so that whatever reaches file descriptors 1 and 2 (torch's log
    handlers, native libraries) is seen."""
    pytest.importorskip("onnx")
    pytest.importorskip("onnxscript")
    out = tmp_path / "policy.onnx"
    done = subprocess.run([sys.executable, "-m", "rlfast", "export", str(run_dir), "--format",
                           "onnx", "-o", str(out)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    (line,) = done.stdout.splitlines()
    assert line.startswith(f"Wrote {out} (onnx; ")
    assert out.is_file() and not os.path.exists(f"{out}.tmp")


def test_quiet_exporter_drops_only_the_known_lines(caplog):
    log = logging.getLogger(_REGISTRATION_LOGGER)
    caplog.set_level(logging.WARNING)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with export_module._quiet_onnx_exporter():
            log.warning("torchvision is not installed. Skipping %s", "torchvision::nms")
            log.warning("an operator could not be registered")
            warnings.warn("internal API", FutureWarning)
            warnings.warn("a real problem", UserWarning)
            print("exporter progress")
    assert [r.getMessage() for r in caplog.records] == ["an operator could not be registered"]
    assert [str(w.message) for w in seen] == ["a real problem"]
    log.warning("torchvision is not installed. Skipping %s", "torchvision::nms")
    assert caplog.records[-1].getMessage().startswith("torchvision")  # only around the export


def test_quiet_exporter_drops_the_recurrent_export_warnings_only():
    """What exporting a GRU policy draws (seen with torch 2.13), dropped; the same kind of
    warning about anything else passes."""
    harmless = [
        "The tensor attributes self.model.body.core.gru._flat_weights[0], "
        "self.model.body.core.gru._flat_weights[1] were assigned during export. Such "
        "attributes must be registered as buffers using the `register_buffer` API",
        "# The axis name: batch will not be used, since it shares the same shape constraints "
        "with another axis: batch.",
    ]
    other = ["The tensor attributes self.model.scale were assigned during export. Such "
             "attributes must be registered as buffers using the `register_buffer` API",
             "# The axis name: time will not be used, since it shares the same shape "
             "constraints with another axis: batch."]
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with export_module._quiet_onnx_exporter():
            for message in harmless + other:
                warnings.warn(message, UserWarning)
    assert [str(w.message) for w in seen] == other


def test_quiet_exporter_shows_the_stdout_of_a_failed_export(capsys):
    with pytest.raises(RuntimeError, match="export failed"):
        with export_module._quiet_onnx_exporter():
            print("step 3 of 4: lowering ... failed")
            raise RuntimeError("export failed")
    captured = capsys.readouterr()
    assert captured.out == "" and "step 3 of 4: lowering ... failed" in captured.err


@pytest.mark.parametrize("make_output", [
    lambda tmp: tmp / "no_such_dir" / "policy.onnx",
    lambda tmp: tmp,  # a directory
    lambda tmp: tmp / "a_file" / "policy.onnx",  # under a file
])
def test_unwritable_output_is_refused_before_any_work(tmp_path, capsys, monkeypatch,
                                                     make_output):
    (tmp_path / "a_file").write_text("x")
    output = str(make_output(tmp_path))

    def no_work(*args, **kwargs):
        raise AssertionError("the run was loaded before the output path was checked")

    monkeypatch.setattr("rlfast.experiments.playback.load_trained_agent", no_work)
    assert main(["export", str(tmp_path), "-o", output]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"rlfast export: error: cannot write {output}: "), line
    assert ".tmp" not in line


def test_failed_write_names_the_output_and_leaves_no_file(run_dir, tmp_path, capsys,
                                                          monkeypatch):
    output = tmp_path / "policy.pt"

    def disk_full(graph, inputs, path):
        with open(path, "wb") as f:
            f.write(b"partial")
        raise OSError(28, "No space left on device", path)

    monkeypatch.setattr(export_module, "_write_torchscript", disk_full)
    assert main(["export", str(run_dir), "--format", "torchscript", "-o", str(output)]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line == f"rlfast export: error: cannot write {output}: No space left on device"
    assert list(tmp_path.iterdir()) == []

