"""The pure parts of scripts/bench/bench_gpu.sh (scripts/bench/_gpu_plan.py, _gpu_replay.py and
the report's tables): the progress.csv reading that times the learning run's +18, the budget
planner, nvidia-smi's samples, the replay section's plan, its steady window past learning start
and its overrides, the sections, and the acceptance verdicts. No processes, no GPU."""
from __future__ import annotations

import argparse
import math
import sys
from datetime import datetime
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts" / "bench"))
import _gpu_plan as plan  # noqa: E402
import _gpu_replay as replay  # noqa: E402
from _gpu_report import tables  # noqa: E402

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


# ---- the replay section (issue 38) ----------------------------------------------------------


def test_replay_plan_puts_the_acceptance_figures_first_and_names_its_overrides():
    items = replay.build_replay_plan(["device", "prefetch"], dqn_window=8.0, sac_window=13.0)
    keys = [i.key for i in items]
    assert keys[:5] == ["dqn:rlfast-device", "sac:rlfast-device", "sac:leanrl", "sac:cleanrl",
                        "dqn:cleanrl"]
    assert len(keys) == len(set(keys)) and keys[-2:] == ["sac:rlfast-host", "dqn:rlfast-host"]
    by_key = {i.key: i for i in items}
    first = by_key["dqn:rlfast-device"]
    assert first.runs == 3 and first.window == 8.0 and first.sets == ("algo.replay_device=device",)
    # the prefetch variant's async run would repeat the first variant's (auto = prefetch on
    # CUDA for a shared replay): its best sync sampler alone
    assert by_key["dqn:rlfast-prefetch"].runs == 1 and by_key["dqn:rlfast-host"].runs == 2
    compiled = by_key["sac:rlfast-prefetch-compile"]
    assert compiled.sets == ("algo.replay_device=prefetch", "algo.compile=True")
    assert "compile" in compiled.tags and "compile" in by_key["sac:leanrl"].tags
    assert all(i.window == 13.0 for i in items if i.kind == "sac")
    assert all(i.kind in plan.REPLAY_KINDS and i.before_learn for i in items)
    # host asked for: measured in its place, not again at the end
    keys = [i.key for i in replay.build_replay_plan(["host"], 1.0, 1.0)]
    assert keys.count("sac:rlfast-host") == 1 and keys[0] == "dqn:rlfast-host"


def test_overrides_the_presets_lack_are_left_out():
    sets = ["algo.replay_device=device", "algo.compile=True"]
    assert replay.effective_sets(sets, {"replay_device": True, "compile": False}) == (
        ["algo.replay_device=device"], ["algo.compile=True"])
    assert replay.effective_sets(sets, {"replay_device": True, "compile": True}) == (sets, [])


def _sac_progress(rows: list[tuple]) -> str:
    """rlfast train's progress.csv with (cum steps, cum time, cum updates) per row."""
    lines = ["Diagnostics/CumSteps,Diagnostics/CumTime (s),Diagnostics/CumUpdates,ReturnAverage"]
    lines += [f"{s},{t},{u},nan" for s, t, u in rows]
    return "\n".join(lines) + "\n"


def test_steady_window_opens_after_learning_start_and_compilation():
    # 1000 steps of prefill in 1 s, a first training row that compiles for 30 s, then 500
    # steps per row at 500 steps/s, then 600
    rows = [(0, 0.0, 0), (500, 0.5, 0), (1000, 1.0, 0), (1500, 31.0, 500)]
    rows += [(1500 + 500 * k, 31.0 + k, 500 + 500 * k) for k in range(1, 6)]
    rows += [(4000 + 600 * k, 36.0 + k, 3000 + 600 * k) for k in range(1, 4)]
    points = replay.progress_points(plan.read_progress(_sac_progress(rows)))
    assert points[3] == (1500.0, 31.0, 500.0)
    # the row after the compiling one is 60x faster: not steady there; the window opens at
    # the end of the first fast row (32 s) and closes 4 training seconds later
    window = replay.steady_window(points, warmup=0.0, seconds=4.0)
    assert window["learn_row"] == 2 and window["start_row"] == 4 and window["end_row"] == 8
    assert window["env_sps"] == pytest.approx(500.0) and window["ups"] == pytest.approx(500.0)
    assert window["complete"] and window["window_s"] == pytest.approx(4.0)
    # with a 33 s warm-up past learning start (at 1 s) it opens at 34 s (3000 steps) and
    # closes at 38 s (5200 steps), over the change of speed
    late = replay.steady_window(points, warmup=33.0, seconds=4.0)
    assert late["start_row"] == 6 and late["end_row"] == 10 and late["complete"]
    assert late["env_sps"] == pytest.approx((5200 - 3000) / 4.0)
    # asked for more than there is: the window so far, marked incomplete
    short = replay.steady_window(points, warmup=0.0, seconds=100.0)
    assert not short["complete"] and short["end_row"] == len(points) - 1
    # before learning starts, or right at it: none
    assert replay.steady_window(points[:4], 0.0, 1.0) is None
    assert replay.steady_window([], 0.0, 1.0) is None
    assert replay.progress_points(plan.read_progress("CumSteps,Other\n1,2\n")) == []


def test_estimator_learns_the_replay_start_up_per_kind_and_what_compile_adds():
    est = plan.Estimator(warmup=2, seconds=6, overhead=15, compile=30, sampler_overhead=6,
                         learn_seconds=300, replay_overhead=20)
    dqn = plan.Item("dqn", "rlfast-device", runs=3, window=8.0)
    sac = plan.Item("sac", "rlfast-device", window=13.0)
    sac_compile = plan.Item("sac", "rlfast-device-compile", window=13.0, tags=("compile",))
    assert est.estimate(dqn) == 3 * (20 + 8) and est.estimate(sac) == 33
    assert est.estimate(sac_compile) == 63
    est.observe(dqn, 3 * (25 + 8))  # 25 s per DQN run: SAC keeps its guess
    assert est.estimate(dqn) == 99 and est.estimate(sac) == 33
    est.observe(sac, 10 + 13)
    assert est.estimate(sac) == 23
    est.observe(sac_compile, 10 + 13 + 45)
    assert est.compile == 45 and est.estimate(sac_compile) == 68
    est.observe(sac, 8 + 13)  # the largest start-up seen stays
    assert est.estimate(sac) == 23


def test_schedule_runs_the_replay_plan_in_order_within_the_budget():
    clock = FakeClock()
    budget = plan.Budget(100.0, clock=clock)
    est = plan.Estimator(warmup=0, seconds=0, overhead=0, compile=30, sampler_overhead=0,
                         learn_seconds=0, replay_overhead=10)
    items = replay.build_replay_plan(["device", "prefetch"], 5.0, 5.0)

    def run(item, timeout):
        clock.now += item.runs * 15.0 + (20.0 if "compile" in item.tags else 0.0)
        return "ok"

    ran = []
    outcomes = plan.schedule(items, budget, est, lambda item, timeout: ran.append(item.key)
                             or run(item, timeout), log=lambda line: None)
    # DQN's three runs (45 s expected and taken: 10 s start-up each), SAC (15 s); leanrl
    # (15 s + 30 s compile) would not fit in the 40 s left with the 5 s margin: deferred, and
    # the cheaper peers run; what is left then fits nothing
    assert ran == ["dqn:rlfast-device", "sac:rlfast-device", "sac:cleanrl", "dqn:cleanrl"]
    assert budget.elapsed() == 90.0
    skipped = {k for k, v in outcomes.items() if v.startswith("skipped: does not fit")}
    assert skipped == {i.key for i in items} - set(ran)


def _dqn_run(runner: str, sampler: str, env_sps: float, sets=("algo.replay_device=device",)):
    return dict(name=f"dqn r8 {runner} {sampler}", runner=runner, sampler=sampler,
                env_sps=env_sps, ups=env_sps / 4, ratio=8.0, target_ratio=8.0,
                t_start=10.0, t_end=16.0, sets=list(sets))


def test_replay_tables_give_the_ratios_and_the_acceptance_verdicts():
    args = argparse.Namespace(device="cuda", dqn_seconds=6.0, dqn_warmup=2.0,
                              dqn_learning_starts=3000, sac_env="HalfCheetah-v5",
                              sac_seconds=10.0, sac_warmup=3.0, sac_learning_starts=5000,
                              envs=[8, 32, 0], budget=420.0)
    items = replay.build_replay_plan(["device", "prefetch"], 8.0, 13.0)
    results = {
        "dqn:rlfast-device": dict(sets=["algo.replay_device=device"], failed={}, contenders=[
            _dqn_run("sync", "cpu", 3000.0), _dqn_run("sync", "gpu", 4400.0),
            _dqn_run("async", "cpu", 6160.0, sets=("algo.replay_device=auto",))]),
        "dqn:rlfast-prefetch": dict(sets=["algo.replay_device=prefetch"], contenders=[
            _dqn_run("sync", "gpu", 4000.0, sets=("algo.replay_device=prefetch",))],
            failed={"dqn r8 async cpu": "ValueError: no"}),
        "dqn:cleanrl": dict(env_sps=1100.0, ups=275.0, n_envs=1, t_start=20.0, t_end=26.0),
        "sac:rlfast-device": dict(sets=["algo.replay_device=device"], env_sps=800.0, ups=800.0,
                                  window_s=10.2, complete=True, t_start=30.0, t_end=40.0),
        "sac:rlfast-prefetch": dict(sets=["algo.replay_device=prefetch"], env_sps=700.0,
                                    ups=700.0, window_s=10.0, complete=False,
                                    note="ran without algo.compile=True not accepted"),
        "sac:leanrl": dict(env_sps=640.0, ups=640.0, window_s=10.0, compiled=True,
                           cuda_graphs=dict(act=True, critic=True, actor=False),
                           graph_fallbacks=dict(actor="RuntimeError: capture")),
        "sac:cleanrl": dict(env_sps=160.0, ups=160.0, window_s=10.0),
    }
    outcomes = {k: "ok" for k in results}
    outcomes["sac:rlfast-host"] = "skipped: does not fit (needs ~33 s)"
    samples = [(12.0, 60.0, 5.0, 900.0), (35.0, 80.0, 5.0, 900.0)]
    accepted = dict(dqn=dict(replay_device=True, compile=False),
                    sac=dict(replay_device=True, compile=True))
    text, verdicts = tables(args, "test machine", items, outcomes, results, samples, None, 400.0,
                            [], accepted)
    assert text.startswith("# rlfast GPU figures (issue 38)") and "## PPO" not in text
    assert "dqn: algo.replay_device yes, algo.compile NO; sac:" in text
    assert "| rlfast-device sync gpu | device | off | 4,400 | 1,100 | 8.00 | 60.0 |  |" in text
    assert "| rlfast-device async cpu | auto | off | 6,160 | 1,540 |" in text
    assert "| rlfast-prefetch dqn r8 async cpu | | | failed | | | | ValueError: no |" in text
    assert "| cleanrl (1 env, host numpy replay) | host | off | 1,100 | 275 | 8.00 |" in text
    assert ("Acceptance, DQN sync >= 1,000 updates/s (was 156): best rlfast-device sync gpu "
            "1,100 -> PASS") in text
    assert ("best rlfast-device async cpu 6,160 / best rlfast-device sync gpu 4,400 = 1.40x "
            "-> PASS") in text
    assert "best rlfast / cleanrl env steps/s: 5.60x" in text and "* replay ratio" not in text
    assert "default on CUDA by measurement: rlfast-device" in text
    assert "| rlfast-device | device | off | 800 | 800 | 10.2 | 80.0 |  |" in text
    assert "window shorter than asked" in text and "ran without algo.compile" in text
    assert "| leanrl | device (torch) | on, CUDA graphs: act, critic | 640 |" in text
    assert "actor: RuntimeError: capture" in text
    assert "| rlfast-host | host | off | - | - | - | - | skipped |" in text
    assert "best rlfast-device 800 -> PASS" in text
    assert "best rlfast / leanrl (measured here, 640): 1.25x" in text
    assert "best rlfast / cleanrl (measured here, 160): 5.00x" in text
    assert verdicts == dict(dqn_sync_ups=1100.0, dqn_async_ratio=pytest.approx(1.4),
                            sac_env_sps=800.0)
    assert "- sac:rlfast-host: skipped: does not fit" in text
    # an async run behind its replay ratio is flagged
    results["dqn:rlfast-device"]["contenders"][2]["ratio"] = 6.0
    text, _ = tables(args, "m", items, outcomes, results, samples, None, 1.0, [], accepted)
    assert "| 6,160 | 1,540 | 6.00 * |" in text and "= 1.40x -> PASS (not at equal" in text
    assert "* replay ratio more than 5% off its target" in text
    # nothing measured: every verdict says so
    text, verdicts = tables(args, "m", items, {}, {}, [], "no nvidia-smi", 1.0, [], {})
    assert text.count("not measured") == 3 and verdicts == {}


def test_sections_choose_the_plan():
    import _gpu as gpu

    keys = [i.key for i in gpu.build_items(gpu.parse_args(["--replay-only"]))]
    assert keys[0] == "dqn:rlfast-device" and not any(k.startswith("train:") for k in keys)
    args = gpu.parse_args(["--replay-only", "--dry-run"])
    assert args.section == "replay" and args.budget == 240.0 and args.sac_learning_starts == 200
    assert gpu.parse_args(["--section", "replay"]).budget == 420.0
    assert [i.key for i in gpu.build_items(gpu.parse_args([]))] == [
        i.key for i in plan.build_plan(8, 32, 64)]
    both = gpu.build_items(gpu.parse_args(["--section", "all"]))
    keys = [i.key for i in both]
    learn = keys.index("learn:pong")
    assert keys[learn + 1] == "dqn:rlfast-device" and keys[-1] == "train:rlfast-compile@64"
    assert not any(i.before_learn for i in both if i.kind in plan.REPLAY_KINDS)
