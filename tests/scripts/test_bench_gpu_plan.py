"""The pure parts of scripts/bench_gpu.sh (scripts/_bench_gpu_plan.py and the report's
tables): the progress.csv reading that times the learning run's +18, the budget planner,
nvidia-smi's samples, and the acceptance verdicts. No processes, no GPU."""
from __future__ import annotations

import argparse
import math
import sys
from datetime import datetime
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
import _bench_gpu_plan as plan  # noqa: E402
from _bench_gpu_report import tables  # noqa: E402

HEADER = ("Diagnostics/NumEvalTrajs,Diagnostics/TrainReturn,Diagnostics/Iteration,"
          "Diagnostics/CumSteps,Diagnostics/CumTime (s),Diagnostics/StepsPerSecond,"
          "Diagnostics/CumCompletedTrajs,ReturnAverage,lossAverage")


def _progress(rows: list[tuple]) -> str:
    """rlfast train's progress.csv (evaluating runner): (train return, cum steps, cum time,
    steps/s, cumulative completed training episodes) per row, evaluation columns NaN."""
    lines = [HEADER, "0,nan,-1,0,0.0,nan,0,nan,nan"]
    for i, (ret, steps, secs, sps, cum) in enumerate(rows):
        lines.append(f"1,{ret},{i},{steps},{secs},{sps},{cum},nan,0.01")
    return "\n".join(lines) + "\n"


def test_progress_rows_and_the_first_time_the_rolling_return_reaches_the_target():
    text = _progress([("nan", 4096, 1.0, 4000, 0), (-20.0, 8192, 2.0, 4100, 4),
                      (17.0, 12288, 3.0, 4200, 8), (19.0, 16384, 4.0, 4300, 12),
                      (20.0, 20480, 5.0, 4400, 14)])
    text += "1,19.5,5,24576"  # a row still being written: left out
    rows = plan.read_progress(text)
    assert len(rows) == 6 and math.isnan(rows[1]["Diagnostics/TrainReturn"])
    points = plan.training_returns(rows)
    assert [p["episodes"] for p in points] == [0, 0, 4, 4, 4, 2]  # from the cumulative count
    assert points[3]["steps"] == 12288 and points[3]["train_s"] == 3.0
    # over >= 4 episodes: each row alone from its 4 episodes on; the 2-episode row averages in
    # the previous row's 4
    assert plan.rolling_return(points, 4)[2:] == [-20.0, 17.0, 19.0, pytest.approx(
        (20 * 2 + 19 * 4) / 6)]
    hit = plan.first_reaching(points, 18.0, 4)
    assert hit["row"] == 4 and hit["steps"] == 16384 and hit["train_s"] == 4.0
    assert hit["rolling_return"] == 19.0
    # over >= 8 episodes the 19 is averaged with the 17 before it: 18.0 reaches 18 there
    hit8 = plan.first_reaching(points, 18.0, 8)
    assert hit8["row"] == 4 and hit8["rolling_return"] == pytest.approx(18.0)
    assert plan.first_reaching(points, 21.0, 4) is None
    assert plan.steady_steps_per_s(points, 2.5) == 4300  # rows from 3 s on: 4200, 4300, 4400
    assert plan.steady_steps_per_s(points, 99.0) is None


def test_progress_of_the_online_runner_and_empty_files():
    text = ("Diagnostics/CumSteps,Diagnostics/CumTime (s),Diagnostics/NewCompletedTrajs,"
            "ReturnAverage\n100,1.0,2,-5.0\n200,2.0,0,nan\n300,3.0,3,18.5\n")
    points = plan.training_returns(plan.read_progress(text))
    assert [p["episodes"] for p in points] == [2, 0, 3]
    assert plan.first_reaching(points, 18.0, 3)["steps"] == 300
    assert plan.read_progress("") == [] and plan.training_returns([]) == []


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_schedule_defers_what_would_eat_the_learning_run_and_skips_unavailable_options():
    clock = FakeClock()
    budget = plan.Budget(200.0, clock=clock)
    est = plan.Estimator(warmup=2, seconds=6, overhead=10, compile=30, sampler_overhead=3,
                         learn_seconds=100, learn_overhead=10)
    T = "train"
    items = [plan.Item(T, "rlfast-random", 32), plan.Item(T, "rlfast-compile", 8,
                                                          tags=("compile", "rlfast-compile")),
             plan.Item(T, "rlfast-cpu", 8), plan.Item(T, "leanrl-alevec", 8, tags=("compile",)),
             plan.Item("learn", "pong"),
             plan.Item(T, "rlfast-compile", 32, before_learn=False,
                       tags=("compile", "rlfast-compile")),
             plan.Item(T, "rlfast-gpu", 32, before_learn=False)]
    ran = []
    walls = {"train:rlfast-random@32": 20.0, "train:rlfast-cpu@8": 30.0,
             "train:rlfast-compile@8": 5.0, "learn:pong": 80.0, "train:rlfast-gpu@32": 18.0,
             "train:leanrl-alevec@8": 30.0}

    def run(item, timeout):
        ran.append((item.key, timeout))
        clock.now += walls[item.key]
        if item.key == "train:rlfast-compile@8":
            return "skipped: not available"
        return "ok"

    outcomes = plan.schedule(items, budget, est, run, log=lambda line: None)
    keys = [k for k, _ in ran]
    # before the learning run 110 s (and a 5 s margin) stay reserved for it: random (18 s
    # expected) runs; compile is unavailable; cpu@8 (expected 20 s after random's 20 s taught
    # an overhead of 12) runs; leanrl (expected 22 + 30 + 8 = 60 s) would eat into the
    # reserve: deferred, and run after the learning run (min(100, 145 - 10) s); then gpu@32
    # fits exactly, and rlfast-compile@32 is skipped without running
    assert keys == ["train:rlfast-random@32", "train:rlfast-compile@8", "train:rlfast-cpu@8",
                    "learn:pong", "train:leanrl-alevec@8", "train:rlfast-gpu@32"], keys
    assert outcomes["train:rlfast-compile@32"] == "skipped: rlfast-compile not available"
    assert outcomes["train:leanrl-alevec@8"] == "ok" and outcomes["learn:pong"] == "ok"
    assert est.overhead == 22.0  # the largest start-up seen (cpu@8: 30 - 8)
    for key, timeout in ran:  # no item may run past the budget
        assert timeout <= 200.0
    assert budget.elapsed() <= 200.0


def test_schedule_skips_the_learning_run_when_too_little_is_left():
    clock = FakeClock()
    budget = plan.Budget(50.0, clock=clock)
    est = plan.Estimator(warmup=1, seconds=1, overhead=5, compile=0, sampler_overhead=1,
                         learn_seconds=300)
    outcomes = plan.schedule([plan.Item("learn", "pong")], budget, est,
                             lambda item, timeout: "ok", log=lambda line: None, min_learn=60)
    assert outcomes["learn:pong"].startswith("skipped: does not fit")


def test_build_plan_puts_the_acceptance_figures_first():
    items = plan.build_plan(8, 32, 64)
    keys = [i.key for i in items]
    learn = keys.index("learn:pong")
    for needed in ("train:rlfast-random@32", "train:rlfast-cpu@32", "train:rlfast-cpu@8",
                   "sampler:gpu@32", "train:leanrl-alevec@8"):
        assert keys.index(needed) < learn
    assert "train:rlfast-random@64" in keys and len(keys) == len(set(keys))
    assert all(not i.before_learn for i in items[learn + 1:])
    assert "train:rlfast-random@64" not in [i.key for i in plan.build_plan(2, 4, None)]


def test_nvidia_smi_samples_and_their_mean_over_a_window():
    stamp = datetime(2026, 11, 13, 12, 0, 0, 500000)
    line = stamp.strftime("%Y/%m/%d %H:%M:%S.%f")[:-3] + ", 35, 10, 1234"
    sample = plan.parse_smi_line(line)
    assert sample == (pytest.approx(stamp.timestamp()), 35.0, 10.0, 1234.0)
    assert plan.parse_smi_line("timestamp, utilization.gpu [%], x, y") is None
    assert plan.parse_smi_line("") is None
    samples = [(t, u, 0.0, 100.0 + t) for t, u in ((1.0, 10.0), (2.0, 30.0), (3.0, 50.0))]
    assert plan.utilisation(samples, 1.5, 3.0) == dict(gpu_util=40.0, mem_util=0.0,
                                                      mem_used_max=103.0, samples=2)
    assert plan.utilisation(samples, 4.0, 5.0) is None


def test_report_tables_give_the_ratios_and_the_acceptance_verdicts():
    args = argparse.Namespace(envs=[8, 32, 0], steps_per_env=128, seconds=6.0, warmup=2.0,
                              device="cuda", budget=480.0)
    items = plan.build_plan(8, 32, None)

    def train(steps_per_s, t0=10.0):
        return dict(steps_per_s=steps_per_s, t_start=t0, t_end=t0 + 6.0)

    results = {"train:rlfast-random@32": train(20000.0), "train:rlfast-cpu@32": train(15000.0),
               "train:rlfast-cpu@8": train(7000.0), "train:leanrl-alevec@8": train(6000.0),
               "sampler:gpu@32": dict(results=[
                   dict(peer="ale", fps=70000.0), dict(sampler="gpu", agent="random", fps=80000.0,
                                                       t_start=0.0, t_end=1.0),
                   dict(sampler="gpu", agent="nature_cnn", fps=72000.0, t_start=1.0,
                        t_end=2.0)]),
               "learn:pong": dict(envs=32, seed=0, target=18.0, min_episodes=32,
                                  stop_reason="target reached", command=["rlfast", "train"],
                                  hit=dict(steps=3e6, wall_s=250.0, train_s=240.0),
                                  wall_s=251.0, steps=3e6, train_s=240.0,
                                  best_rolling_return=18.2, last_rolling_return=18.2,
                                  episodes=400.0, steady_steps_per_s=13000.0)}
    outcomes = {k: "ok" for k in results}
    outcomes["train:rlfast-compile@8"] = "skipped: not available"
    samples = [(12.0, 40.0, 5.0, 900.0), (1.5, 20.0, 1.0, 800.0)]
    text, verdicts = tables(args, "test machine", items, outcomes, results, samples, None, 400.0,
                            [])
    assert "Machine: test machine" in text
    assert "| gpu | 80,000 | 72,000 | 0.90 | 20.0 |" in text
    assert "gpu sampler CNN / random >= 0.85: 0.90 -> PASS" in text
    assert "| rlfast-cpu | 7,000 | 15,000 | 0.75 | 40.0 |" in text
    assert "| rlfast-compile | skipped | - | - | - |" in text
    assert "best rlfast-cpu 15,000 / 20,000 = 0.75 -> PASS" in text
    assert "PPO 8 envs >= 6,800 env steps/s: best rlfast-cpu 7,000 -> PASS" in text
    assert "leanrl-alevec at 8 envs: 6,000 env steps/s; best rlfast / it = 1.17" in text
    assert "| yes | 3,000,000 | 250 | 240 | 18.20 | 18.20 | 400 | 13,000 | target reached |" in text
    assert "within 300 s: PASS" in text
    assert "- train:rlfast-compile@8: skipped: not available" in text
    assert verdicts["ppo_main_share"] == pytest.approx(0.75)
    assert verdicts["gpu_cnn_share"] == pytest.approx(0.9) and verdicts["learn_reached"]
