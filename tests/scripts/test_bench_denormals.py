"""scripts/bench/bench_denormals.py: the count of subnormal optimizer state against a hand
count, the case parser, and a dry run that prints the table and writes its record."""
from __future__ import annotations

import json
import sys

import pytest
import torch

from tests.scripts._script_module import script_module

pytest.importorskip("minatar")


@pytest.fixture(scope="module")
def bench():
    with script_module("bench/bench_denormals.py", "bench_denormals") as module:
        yield module


@pytest.fixture(autouse=True)
def _flush_off_after():
    yield
    torch.set_flush_denormal(False)


def test_subnormal_share_counts_only_nonzero_values_below_the_normal_range(bench):
    torch.set_flush_denormal(False)
    tiny = torch.finfo(torch.float32).tiny
    p = torch.nn.Parameter(torch.zeros(6))
    opt = torch.optim.Adam([p])
    # 2 subnormal of 6 in exp_avg, 1 of 4 in exp_avg_sq (zeros and normals do not count);
    # the 0-d step count is not a moment and is left out.
    opt.state[p] = dict(step=torch.tensor(3.0),
                        exp_avg=torch.tensor([tiny / 4, -tiny / 8, 0.0, tiny, 1.0, -2.0]),
                        exp_avg_sq=torch.tensor([tiny / 2, 0.0, 3.0, tiny * 2]))
    assert bench.subnormal_share(opt) == pytest.approx(3 / 10)


def test_cases_name_an_algorithm_and_an_env_id_with_colons(bench):
    assert bench.parse_case("rainbow:minatar:breakout") == ("rainbow", "minatar:breakout")
    with pytest.raises(SystemExit, match="ALGO:ENV"):
        bench.parse_case("rainbow")


def test_dry_run_prints_the_table_and_writes_the_record(bench, tmp_path, capsys):
    if not torch.set_flush_denormal(True):
        pytest.skip("this CPU cannot flush subnormals")
    out = tmp_path / "denormals.json"
    threads = torch.get_num_threads()
    assert bench.main(["--dry-run", "--cases", "dqn:minatar:breakout", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "| dqn:minatar:breakout |" in printed and "default / flushed" in printed
    record = json.loads(out.read_text())
    (result,) = record["results"]
    assert len(result["ms_per_update"]["default"]) == len(result["ms_per_update"]["flushed"]) == 2
    assert all(t > 0 for side in result["ms_per_update"].values() for t in side)
    assert result["median_ratio"] == pytest.approx(
        sorted(result["ratios"])[0] / 2 + sorted(result["ratios"])[1] / 2)
    assert "machine" in record
    assert torch.get_num_threads() == threads  # the runs gave the caller its count back
    assert not sys.modules["rlfast.runners.master_affinity"].flushes_denormals()
