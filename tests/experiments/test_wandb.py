"""``--wandb``: an offline W&B run holds every logged progress.csv column, and a resumed run
continues the same W&B run. No network: ``WANDB_MODE=offline``; the offline run files are
read back with a reader of W&B's record log written here (W&B ships none)."""
from __future__ import annotations

import csv
import glob
import json
import math
import os
import struct

import pytest

wandb = pytest.importorskip("wandb")
from wandb.proto import wandb_internal_pb2  # noqa: E402

from rlfast.cli import main  # noqa: E402

BLOCK = 32768  # W&B's record log: 32 KiB blocks of (crc32, length, type)-framed chunks
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


@pytest.fixture(autouse=True)
def _offline(monkeypatch, tmp_path):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    for var in ("WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR"):
        monkeypatch.setenv(var, str(tmp_path / "wandb_home"))


def _records(path: str) -> list:
    data = open(path, "rb").read()
    assert data[:4] == b":W&B", path
    pos, chunks, partial = 7, [], b""
    while pos + 7 <= len(data):
        left = BLOCK - pos % BLOCK
        if left < 7:  # a block's tail too short for a header is padding
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if length == 0 and kind == 0:
            pos += left
            continue
        chunk = data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind == FULL:
            chunks.append(chunk)
        elif kind == FIRST:
            partial = chunk
        elif kind == MIDDLE:
            partial += chunk
        elif kind == LAST:
            chunks.append(partial + chunk)
    records = []
    for chunk in chunks:
        record = wandb_internal_pb2.Record()
        record.ParseFromString(chunk)
        records.append(record)
    return records


def _history(path: str) -> tuple[str, list[dict], dict]:
    """(run id, history rows, config) of an offline run file."""
    run_id, rows, config = None, [], {}
    for record in _records(path):
        kind = record.WhichOneof("record_type")
        if kind == "run":
            run_id = record.run.run_id
            config.update({item.key: json.loads(item.value_json)
                           for item in record.run.config.update})
        elif kind == "history":
            rows.append({item.key or "/".join(item.nested_key): json.loads(item.value_json)
                         for item in record.history.item})
    return run_id, rows, config


def _progress(run_dir) -> list[dict]:
    with open(os.path.join(run_dir, "progress.csv"), newline="") as f:
        return list(csv.DictReader(f))


def _numeric(cell: str):
    try:
        value = float(cell)
    except ValueError:
        return None
    return None if math.isnan(value) else value


def _offline_files(run_dir) -> list[str]:
    return sorted(glob.glob(os.path.join(run_dir, "wandb", "offline-run-*", "run-*.wandb")))


def test_train_and_resume_log_every_column_to_one_wandb_run(tmp_path):
    run_dir = tmp_path / "run"
    common = ["--sampler", "serial", "--seed", "0", "--no-progress", "--set",
              "runner.log_interval_steps=2048"]
    assert main(["train", "ppo", "CartPole-v1", "--steps", "4096", "--log-dir", str(run_dir),
                 "--wandb", "test", *common]) == 0
    (first,) = _offline_files(run_dir)
    run_id, rows, config = _history(first)
    progress = _progress(run_dir)
    kinds = [r.WhichOneof("record_type") for r in _records(first)]
    assert len(rows) == len(progress) == 3, kinds  # the evaluation before training, 2 rows
    for row, logged in zip(progress, rows):
        for key, cell in row.items():
            value = _numeric(cell)
            if value is None:
                assert key not in logged or logged[key] is None
            else:
                assert logged[key] == pytest.approx(value, rel=1e-6), key
    assert config["algo"] == "ppo" and config["env"] == "CartPole-v1"
    assert config["config"]["algo"]["learning_rate"] > 0
    assert (run_dir / "wandb_run_id").read_text().strip() == run_id
    assert json.loads((run_dir / "params.json").read_text())["wandb"]["project"] == "test"

    # resume (without --wandb: the run was tracked) continues the same W&B run
    assert main(["resume", str(run_dir), "--steps", "8192", "--no-progress"]) == 0
    files = _offline_files(run_dir)
    assert len(files) == 2 and first in files
    (second,) = [f for f in files if f != first]
    resumed_id, resumed_rows, _ = _history(second)
    assert resumed_id == run_id
    steps = [r["Diagnostics/CumSteps"] for r in resumed_rows]
    assert steps == [6144, 8192]  # the rows after the snapshot, appended to the run
    assert len(_progress(run_dir)) == 5
    # the W&B service process ended with the run: nothing outlives it
    import psutil
    assert [p.name() for p in psutil.Process().children(recursive=True)
            if "wandb" in p.name()] == []


def test_wandb_needs_its_package_and_overwrite_starts_a_new_run(tmp_path, monkeypatch, capsys):
    run_dir = tmp_path / "run"
    argv = ["train", "ppo", "CartPole-v1", "--steps", "2048", "--log-dir", str(run_dir),
            "--sampler", "serial", "--no-progress", "--wandb"]
    assert main(argv) == 0
    first_id = (run_dir / "wandb_run_id").read_text().strip()
    assert json.loads((run_dir / "params.json").read_text())["wandb"]["project"] == "rlfast"
    assert main(argv + ["--overwrite", "--wandb-artifacts"]) == 0
    second_id = (run_dir / "wandb_run_id").read_text().strip()
    assert second_id != first_id
    (newest,) = [f for f in _offline_files(run_dir) if second_id in f]
    (artifact,) = [r.artifact for r in _records(newest)
                   if r.WhichOneof("record_type") == "artifact"]
    assert artifact.type == "model"  # the snapshots, uploaded as one artifact
    assert [entry.path for entry in artifact.manifest.contents] == ["params.pkl"]
    import rlfast.experiments.wandb_tracking as tracking

    def missing():
        raise ImportError("--wandb needs the wandb package (No module named 'wandb'): "
                          + tracking.WANDB_EXTRA)
    monkeypatch.setattr(tracking, "_import_wandb", missing)
    capsys.readouterr()
    assert main(["train", "ppo", "CartPole-v1", "--steps", "2048", "--log-dir",
                 str(tmp_path / "other"), "--sampler", "serial", "--no-progress",
                 "--wandb"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("rlfast: error: --wandb needs the wandb package") and "\n" not in err
    assert "rlfast[wandb]" in err and not (tmp_path / "other" / "progress.csv").exists()
