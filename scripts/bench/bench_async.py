#!/usr/bin/env python
"""Asynchronous vs synchronous runners: env steps/s and optimizer updates/s at one replay ratio.

Side by side in one run, the contenders interleaved over ``--rounds`` rounds (the order
reversed every other round, so that drift in the machine's load hits every contender alike):

1. DQN on ``atari:pong`` (the ``dqn`` preset's atari config), once per ``--dqn-replay-ratios``
   value: ``AsyncRl`` with an async sampler against ``MinibatchRl`` with the synchronous
   sampler(s) of ``--sync-samplers``, all with the same ``algo.replay_ratio``.
2. SAC on Pendulum-v1 (the ``sac`` preset, Pendulum-tuned): the same, at ``--sac-replay-ratio``.
3. DQN on Pong (at the last DQN ratio): the async run with ``copier="process"`` against
   ``copier="optimizer"`` (the default), both with the sampler running free.

Equal replay ratio. The async runner throttles its optimizer to ``replay_ratio``; with
``sampler_throttle=True`` (optimizer copier) it also holds the sampler back so that the ratio
cannot fall below it. The async contender of comparisons 1 and 2 runs throttled, so it trains
on as many samples per env step as the sync runner; comparison 3 runs the default (sampler at
full speed), where an optimizer that cannot keep up lets the achieved ratio fall (such rows are
flagged *, their env steps/s are not at equal ratio). A ratio below one update per sync
iteration cannot be run by ``MinibatchRl`` (it makes ``round(ratio * batch / batch_size)``
updates per iteration, at least one), so ``batch_T`` grows until that is a whole number, for
every contender of that ratio alike (shown in the header).

Every run is one child process (``--child``): it builds the preset through
``build_experiment`` (no evaluation envs, no decorrelation steps, ``min_steps_learn`` small,
``replay_size`` 100k), swaps in a runner with online logging, and trains until its measurement
window is over: the window opens ``--warmup`` s after the first gradient update, lasts
``--seconds`` and closes at the first iteration (sync) or received batch (async) after that;
the run then stops, ``runner.train()`` shutting every process down on the way out
(``--quick`` forks the children from the parent instead, which has imported torch and rlfast
once: a smoke test's figures, not measurements). Figures over the window:

- env steps/s: steps sampled (async: in the batches the optimizer received) per second;
- updates/s: gradient updates per second;
- replay ratio: updates x batch_size / env steps, as achieved (target in brackets);
- optim busy: the share of the window the master spent inside ``algo.optimize_agent``
  (async: with the batches it takes in between single updates);
- CPU master / children / others: CPU seconds per wall second of the master (the optimizer),
  of its children (sampler process, workers, copier) and of every other process on the
  machine (load this benchmark did not make);
- CPU wait master / children: seconds per wall second their threads were runnable but waited
  for a core (Linux schedstat): contention, e.g. with other load on a pinned core.

On a shared machine other load distorts the comparison: a sync master allowed on every core
moves away from it, while the pinned optimizer and sampler processes of an async run share
their cores with it (their CPU wait shows it). ``--quiet-wait S`` waits up to S seconds before
each run for the other load to drop below ``--quiet-load`` cores; ``--no-pin`` runs every
layout unpinned (affinity codes with ``0saf``).

Replay ratios. DQN's preset ratio 8 (one update of 32 per 4 env steps) makes training the
bottleneck on CPUs: sampling is a few percent of a sync iteration, so async can hide only
those. The second default ratio, 0.5, roughly balances a 1-core sampler and a 1-core
optimizer on a 2-core CPU machine, where overlapping them pays most.

Layouts on an n-core CPU machine (``--device cpu``): sync ``serial`` (the master, allowed on
every core with ``--sync-threads`` torch threads, samples and optimizes in turn) and sync
``cpu`` (one worker per core; the master optimizes while the workers wait); async: the ``ass``
affinity code ``encode_affinity(n_cpu_core=n, async_sample=True, cpu_reserved=1,
cpu_per_run=n)``: the optimizer on core 0 with one torch thread, the sampler process
(``--async-sampler`` serial, or cpu with one worker per remaining core) on the other cores.
``--device cuda``: the optimizer trains on GPU 0 with one core and the sampler process gets the
others (``encode_affinity(n_cpu_core=n, n_gpu=1, async_sample=True, cpu_reserved=1)``,
``AsyncCpuSampler``: agent on the CPU in the workers); the sync contenders are the cpu sampler
and the gpu sampler (agent on GPU 0 in the master), the master training on GPU 0.

Usage: python scripts/bench/bench_async.py [--rounds 3] [--seconds 20] [--warmup 4]
           [--dqn-replay-ratios 8 0.5] [--sac-replay-ratio 256] [--sync-samplers serial cpu]
           [--sync-threads 1 [2]] [--benchmarks dqn sac copier] [--device cpu|cuda]
           [--quiet-wait 0] [--no-pin] [--no-throttle] [--set KEY=VALUE ...]
           [--async-set KEY=VALUE ...] [--runners sync async] [--keep-going] [--quick]
           [--json OUT]
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import Window as BaseWindow  # noqa: E402
from _common import (interleave, machine, machine_busy_seconds, markdown_table,  # noqa: E402
                     median, medians, paired_ratios, parse_result, preload_child_modules,
                     print_result, run_forked, run_process, write_json)

SCRIPT = os.path.abspath(__file__)
FIGURES = ("env_sps", "ups", "ratio")
BENCHES = {
    "dqn": dict(algo="dqn", env="atari:pong", label="DQN atari:pong"),
    "sac": dict(algo="sac", env="Pendulum-v1", label="SAC Pendulum-v1"),
}


# ---- the child: one run ------------------------------------------------------------------------

class WindowDone(Exception):
    """Raised inside a synchronous run when its measurement window is over (``train`` shuts
    the sampler down on the way out, as on any exception)."""


def _run_delay(pid: int) -> float:
    """Seconds the threads of process ``pid`` spent runnable but waiting for a CPU (Linux
    /proc/<pid>/task/*/schedstat, second field, ns; 0 where unavailable)."""
    total = 0
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{task}/schedstat") as f:
                    total += int(f.read().split()[1])
            except (OSError, IndexError, ValueError):
                pass
    except OSError:
        pass
    return total / 1e9


class Window(BaseWindow):
    """The shared measurement window (its clock starts at the first update), observed after
    every iteration (sync) or received batch (async), with what the master and its children
    did over it: CPU, CPU wait, and the share of time spent optimizing."""

    def __init__(self, seconds: float, warmup: float, optimize_time: dict):
        super().__init__(seconds, warmup)
        # Seconds inside algo.optimize_agent: the finished calls' total and the start of the
        # call in progress (the async runner takes in batches between single updates).
        self.optimize_time = optimize_time

    def point(self, steps: int, updates: int) -> dict:
        import psutil
        me = psutil.Process()
        children = children_wait = 0.0
        for child in me.children(recursive=True):
            try:
                t = child.cpu_times()
                children += t.user + t.system
                children_wait += _run_delay(child.pid)
            except psutil.Error:
                pass
        t = me.cpu_times()
        point = super().point(steps, updates)
        since = self.optimize_time["since"]
        optimize = self.optimize_time["total"] + (0.0 if since is None else point["t"] - since)
        return dict(point, cpu_master=t.user + t.system, cpu_children=children,
                    cpu_machine=machine_busy_seconds(), optimize=optimize,
                    wait_master=_run_delay(me.pid), wait_children=children_wait)

    def result(self, batch_size: int) -> dict:
        r = super().result()
        a, b, wall = self.start, self.end, r["window_s"]

        def per_s(key: str) -> float:
            return (b[key] - a[key]) / wall

        return dict(r, ratio=r["updates"] * batch_size / r["steps"] if r["steps"] else 0.0,
                    optim_busy=per_s("optimize"), cpu_master=per_s("cpu_master"),
                    cpu_children=per_s("cpu_children"), wait_master=per_s("wait_master"),
                    wait_children=per_s("wait_children"),
                    cpu_other=max(0.0, per_s("cpu_machine") - per_s("cpu_master")
                                  - per_s("cpu_children")))


def _remap(affinity, cpus: list[int]):
    """An affinity decoded from a code (cores 0..n-1) on this process's actual cores."""
    if isinstance(affinity, dict):
        out = type(affinity)()
        for key, value in affinity.items():
            if key in ("all_cpus", "master_cpus"):
                value = [cpus[c] for c in value]
            elif key == "workers_cpus":
                value = [[cpus[c] for c in w] for w in value]
            else:
                value = _remap(value, cpus)
            out[key] = value
        return out
    if isinstance(affinity, list):
        return [_remap(a, cpus) for a in affinity]
    return affinity


def layout(spec: dict) -> tuple[str, dict, str | None]:
    """(sampler name for build_experiment, affinity dict, affinity code or None) of a run."""
    from rlfast.launching import affinity_from_code, encode_affinity
    from rlfast.utils.misc import available_cpus

    cpus = available_cpus()
    n = len(cpus)
    cuda = spec["device"] == "cuda"
    sampler = spec["sampler"]
    pin = spec.get("pin", True)
    if spec["runner"] == "async":
        if n < 2:
            raise SystemExit("an async run needs at least 2 cores (optimizer + sampler)")
        if cuda:
            code = encode_affinity(n_cpu_core=n, n_gpu=1, async_sample=True, cpu_reserved=1,
                                   hyperthread_offset=0, run_slot=0, set_affinity=pin,
                                   sample_gpu_per_run=1 if sampler == "gpu" else 0,
                                   optim_sample_share_gpu=sampler == "gpu")
        else:
            code = encode_affinity(n_cpu_core=n, n_gpu=0, async_sample=True, cpu_reserved=1,
                                   cpu_per_run=n, hyperthread_offset=0, run_slot=0,
                                   set_affinity=pin)
        return sampler, _remap(affinity_from_code(code), cpus), code
    threads = spec["threads"]
    affinity = dict(master_cpus=cpus, master_torch_threads=threads,
                    cuda_idx=0 if cuda else None, set_affinity=pin)
    if sampler != "serial":
        n_workers = min(n, spec["batch_B"])
        affinity.update(workers_cpus=[[cpus[i]] for i in range(n_workers)],
                        worker_torch_threads=1)
    return sampler, affinity, None


def run_child(spec: dict) -> dict:
    """Build and run one contender; return its window figures."""
    import torch

    from rlfast.experiments.presets import build_experiment, get_preset
    from rlfast.runners import AsyncRl, MinibatchRl
    from rlfast.utils.logging import logger_context

    bench = BENCHES[spec["bench"]]
    config = get_preset(bench["algo"], bench["env"])
    config["algo"].update(replay_ratio=spec["replay_ratio"], replay_size=spec["replay_size"],
                          min_steps_learn=spec["min_steps_learn"])
    if spec.get("sets"):  # --set KEY=VALUE, as rlfast train's (unknown keys are refused)
        from rlfast.experiments.config import apply_overrides
        config = apply_overrides(config, spec["sets"])
    # Online logging only, no evaluation envs; no decorrelation steps (startup time only).
    config["sampler"].update(eval_n_envs=0, max_decorrelation_steps=0)
    for key in ("batch_T", "batch_B"):
        if spec.get(key):
            config["sampler"][key] = spec[key]
    spec["batch_B"] = config["sampler"]["batch_B"]
    sampler, affinity, code = layout(spec)
    built = build_experiment(bench["algo"], bench["env"], config, sampler=sampler,
                             seed=spec["seed"], affinity=affinity, runner=spec["runner"])
    algo = built.algo
    optimize_time = dict(total=0.0, since=None)
    window = Window(spec["seconds"], spec["warmup"], optimize_time)
    optimize_agent = algo.optimize_agent

    def timed_optimize(*args, **kwargs):
        optimize_time["since"] = time.perf_counter()
        try:
            return optimize_agent(*args, **kwargs)
        finally:
            optimize_time["total"] += time.perf_counter() - optimize_time["since"]
            optimize_time["since"] = None

    algo.optimize_agent = timed_optimize
    common = dict(algo=algo, agent=built.agent, sampler=built.sampler, n_steps=10 ** 9,
                  seed=spec["seed"], affinity=affinity, progress_bar=False,
                  log_interval_steps=spec["log_interval_steps"])

    if spec["runner"] == "async":
        class TimedAsyncRl(AsyncRl):
            def on_batch(self, itr, traj_infos):
                super().on_batch(itr, traj_infos)
                if window.observe(self.pace.received * self.itr_batch_size,
                                  self.algo.update_counter):
                    self.stop_requested = True

        kwargs = dict(copier=spec["copier"])
        if spec.get("throttle"):
            kwargs["sampler_throttle"] = True
        runner = TimedAsyncRl(**kwargs, **common)
    else:
        class TimedMinibatchRl(MinibatchRl):
            def store_diagnostics(self, itr, traj_infos, opt_info):
                super().store_diagnostics(itr, traj_infos, opt_info)
                if window.observe((itr + 1) * self.itr_batch_size, self.algo.update_counter):
                    raise WindowDone

        runner = TimedMinibatchRl(**common)
    with tempfile.TemporaryDirectory() as log_dir:
        with logger_context(log_dir, 0, "bench_async", {}, override_prefix=True,
                            snapshot_mode="none"):
            try:
                runner.train()
            except WindowDone:
                pass
    result = window.result(algo.batch_size)
    result.update(target_ratio=float(algo.replay_ratio), batch_size=algo.batch_size,
                  itr_batch=built.sampler.batch_spec.size,
                  updates_per_optimize=algo.updates_per_optimize, affinity_code=code,
                  torch_threads_child=torch.get_num_threads())
    return result


# ---- the parent: contenders, rounds, table ------------------------------------------------------

def throttle_supported() -> bool:
    """Whether this rlfast's async runner has ``sampler_throttle`` (equal replay ratio)."""
    import inspect

    from rlfast.runners import AsyncRlBase
    return "sampler_throttle" in inspect.signature(AsyncRlBase.__init__).parameters


def whole_batch_T(bench: str, ratio: float, batch_B: int | None) -> tuple[int, int]:
    """(batch_T, batch_B) of the preset, batch_T grown (up to 64x) until ``ratio`` makes a
    whole number of updates per sampler iteration (what ``MinibatchRl`` can run)."""
    from rlfast.experiments.presets import get_preset

    b = BENCHES[bench]
    config = get_preset(b["algo"], b["env"])
    T, B = config["sampler"]["batch_T"], batch_B or config["sampler"]["batch_B"]
    batch_size = config["algo"]["batch_size"]
    for t in range(T, 64 * T + 1):
        updates = ratio * t * B / batch_size
        if updates >= 1 - 1e-9 and abs(updates - round(updates)) < 1e-9:
            return t, B
    return T, B


def _fmt(x: float) -> str:
    return f"{x:g}"


def contenders(args: argparse.Namespace) -> list[dict]:
    """Every run of one round, in the order of the first round. ``group`` names the comparison
    a run belongs to; ``role``: ``sync``, ``async`` (throttled to the replay ratio when the
    runner can: the equal-ratio contender), ``free`` (async, sampler at full speed, the
    runner's default) or ``copier`` (``free`` with the copier process)."""
    cuda = args.device == "cuda"
    sync_samplers = args.sync_samplers or (["cpu", "gpu"] if cuda else ["serial", "cpu"])
    a_sampler = "cpu" if cuda else args.async_sampler
    throttle = throttle_supported() and not args.no_throttle
    out = []
    common = dict(device=args.device, seconds=args.seconds, warmup=args.warmup, seed=0,
                  pin=not args.no_pin)

    def add(base, name, group, role, runner, sampler, threads=1, copier="optimizer",
            throttled=False):
        if role in ("sync", "async") and runner not in args.runners:
            return
        sets = list(args.set) + (list(args.async_set) if runner == "async" else [])
        out.append(dict(base, name=name, group=group, role=role, runner=runner,
                        sampler=sampler, threads=threads, copier=copier, throttle=throttled,
                        sets=sets))

    for i, ratio in enumerate(args.dqn_replay_ratios):
        last = i == len(args.dqn_replay_ratios) - 1
        T, B = whole_batch_T("dqn", ratio, args.dqn_batch_B)
        dqn = dict(common, bench="dqn", replay_ratio=ratio, batch_T=T, batch_B=B,
                   min_steps_learn=args.dqn_min_steps_learn, replay_size=args.dqn_replay_size,
                   log_interval_steps=args.dqn_log_interval)
        tag, group = f"dqn r{_fmt(ratio)}", f"dqn r{_fmt(ratio)}"
        if "dqn" in args.benchmarks:
            for s in sync_samplers:
                for t in args.sync_threads:
                    add(dqn, f"{tag} sync {s} {t}t", group, "sync", "sync", s, threads=t)
            add(dqn, f"{tag} async {a_sampler}" + (" throttled" if throttle else ""), group,
                "async", "async", a_sampler, throttled=throttle)
        if "copier" in args.benchmarks and last:
            add(dqn, f"{tag} async {a_sampler} copier=optimizer", "copier", "free", "async",
                a_sampler)
            add(dqn, f"{tag} async {a_sampler} copier=process", "copier", "copier", "async",
                a_sampler, copier="process")
    if "sac" in args.benchmarks:
        ratio = args.sac_replay_ratio
        T, B = whole_batch_T("sac", ratio, None)
        sac = dict(common, bench="sac", replay_ratio=ratio, batch_T=T, batch_B=B,
                   min_steps_learn=args.sac_min_steps_learn, replay_size=args.sac_replay_size,
                   log_interval_steps=args.sac_log_interval)
        group = f"sac r{_fmt(ratio)}"
        for t in args.sync_threads:
            add(sac, f"{group} sync serial {t}t", group, "sync", "sync", "serial", threads=t)
        add(sac, f"{group} async serial" + (" throttled" if throttle else ""), group, "async",
            "async", "serial", throttled=throttle)
    return out


def run_contender(spec: dict, timeout_s: float, fork: bool = False) -> dict:
    """One contender in a fresh child process (its own process group, killed on timeout): a
    new interpreter, or with ``fork`` (``--quick``) a fork of this process, which spares the
    smoke test the start-up (imports) of every child; the measurements want the former."""
    if fork:
        finished = run_forked(lambda: print_result(run_child(spec)), timeout_s)
    else:
        finished = run_process([sys.executable, SCRIPT, "--child", json.dumps(spec)],
                               timeout_s, grace=0.0)
    if finished[0] is None:
        raise RuntimeError(f"{spec['name']} did not finish within {timeout_s:.0f} s:\n"
                           f"{(finished[1] + finished[2])[-3000:]}")
    return parse_result(spec["name"], *finished)


def wait_for_quiet(max_s: float, max_load: float) -> float:
    """Wait (at most ``max_s`` s) until the machine's busy cores, measured over 1 s while no
    run of this benchmark is going, fall below ``max_load``; return the seconds waited."""
    import psutil

    start = time.monotonic()
    while time.monotonic() - start < max_s:
        busy = psutil.cpu_percent(interval=1.0) / 100 * (psutil.cpu_count() or 1)
        if busy < max_load:
            break
    return time.monotonic() - start


def off_ratio(m: dict) -> bool:
    """The run achieved a replay ratio more than 5% away from its target."""
    return abs(m["ratio"] / m["target_ratio"] - 1.0) > 0.05


def summarize(specs: list[dict], results: dict[str, list[dict]]) -> dict:
    """Medians per contender and the ratios of each comparison: the median of the per-round
    ratios (runs of the same round ran minutes apart) and the ratio of the medians."""
    med = {spec["name"]: medians(results[spec["name"]],
                                 ("env_sps", "ups", "ratio", "optim_busy", "cpu_master",
                                  "cpu_children", "cpu_other", "wait_master", "wait_children",
                                  "target_ratio"))
           for spec in specs}
    comparisons = []

    def compare(label, num, den, kind, title=""):
        pairs = {k: paired_ratios([r[k] for r in results[num]], [r[k] for r in results[den]])
                 for k in ("env_sps", "ups")}
        comparisons.append(dict(
            label=label, kind=kind, title=title, num=num, den=den,
            env_sps_paired=median(pairs["env_sps"]), ups_paired=median(pairs["ups"]),
            env_sps=med[num]["env_sps"] / med[den]["env_sps"],
            ups=med[num]["ups"] / med[den]["ups"]))

    for group in dict.fromkeys(s["group"] for s in specs):
        sync = [s["name"] for s in specs if s["group"] == group and s["role"] == "sync"]
        if not sync:
            continue
        best = max(sync, key=lambda n: med[n]["env_sps"])
        label = BENCHES[group.split()[0]]["label"] + f", replay ratio {group.split()[1][1:]}"
        for s in specs:
            if s["group"] == group and s["role"] == "async":
                compare(f"{label}: async / best sync", s["name"], best, group.split()[0],
                        title=label)
    proc = [s["name"] for s in specs if s["role"] == "copier"]
    opt = [s["name"] for s in specs if s["role"] == "free"]
    if proc and opt:
        compare("DQN atari:pong: copier=process / copier=optimizer", proc[0], opt[0],
                "copier")
    return dict(medians=med, comparisons=comparisons)


def print_table(specs: list[dict], results: dict, summary: dict, args) -> None:
    med, rows = summary["medians"], []
    for spec in specs:
        m = med[spec["name"]]
        rows.append([spec["name"], f"{m['env_sps']:,.1f}", f"{m['ups']:,.2f}",
                     f"{m['ratio']:.2f} ({m['target_ratio']:g})" + (" *" if off_ratio(m) else ""),
                     f"{100 * m['optim_busy']:.0f}%", f"{m['cpu_master']:.2f}",
                     f"{m['cpu_children']:.2f}", f"{m['cpu_other']:.2f}",
                     f"{m['wait_master']:.2f} / {m['wait_children']:.2f}",
                     len(results[spec["name"]])])
    print("\n" + markdown_table(
        ["run", "env steps/s", "updates/s", "replay ratio (target)", "optim busy", "CPU master",
         "CPU children", "CPU others", "CPU wait master / children", "rounds"], rows,
        "l" + "r" * 9))
    print("\n" + markdown_table(
        ["comparison", "env steps/s: paired (of medians)", "updates/s: paired (of medians)"],
        [[f"{c['label']} ({c['num']} / {c['den']})",
          f"{c['env_sps_paired']:.2f}x ({c['env_sps']:.2f}x)",
          f"{c['ups_paired']:.2f}x ({c['ups']:.2f}x)"] for c in summary["comparisons"]], "lrr"))
    print("\nMedians over rounds. replay ratio: updates x batch_size / env steps achieved in the "
          "window; * = more than 5% off the target (below it: the async optimizer fell behind a "
          "sampler that runs free, so that row's env steps/s are not at equal replay ratio). "
          "optim busy: share of the window inside algo.optimize_agent. CPU: cores kept busy (CPU s "
          "per wall s) by the master (optimizer), by its children (sampler process, workers, "
          "copier) and by every other process on the machine (load this benchmark did not "
          "make; pinned async processes cannot move away from it). CPU wait: seconds per wall "
          "second that the master's / the children's threads were runnable but waiting for a "
          "core (contention). paired: median over rounds of the ratio of the two runs of each "
          "round.")
    for c in summary["comparisons"]:
        if c["kind"] == "dqn":
            ok = "meets" if c["env_sps_paired"] >= args.target else "misses"
            print(f"Target async env steps/s >= {args.target:g}x the best sync, "
                  f"{c['title']}: {c['env_sps_paired']:.2f}x, {ok} it"
                  + (" (not at equal replay ratio: see *)" if off_ratio(med[c["num"]]) else "")
                  + ".")


def parse_args(argv: list[str] | None = None) -> tuple[argparse.ArgumentParser,
                                                       argparse.Namespace]:
    """The parser and the arguments of ``argv`` (the command line's by default)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=20.0,
                        help="measurement window of each run, after the warm-up (default 20)")
    parser.add_argument("--warmup", type=float, default=4.0,
                        help="seconds after the first update before the window opens")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--benchmarks", nargs="+", default=["dqn", "sac", "copier"],
                        choices=["dqn", "sac", "copier"])
    parser.add_argument("--dqn-replay-ratios", type=float, nargs="+", default=[8.0, 0.5],
                        help="one DQN comparison per value (preset: 8; 0.5 balances sampling "
                             "and training on a 2-core CPU machine); the copier comparison "
                             "runs at the last")
    parser.add_argument("--dqn-min-steps-learn", type=int, default=3000)
    parser.add_argument("--dqn-replay-size", type=int, default=100_000)
    parser.add_argument("--dqn-batch-B", type=int, default=None,
                        help="environments per sampler (preset: 16)")
    parser.add_argument("--dqn-log-interval", type=int, default=10_000)
    parser.add_argument("--sac-replay-ratio", type=float, default=256.0,
                        help="algo.replay_ratio of every SAC run (preset: 256)")
    parser.add_argument("--sac-min-steps-learn", type=int, default=1000)
    parser.add_argument("--sac-replay-size", type=int, default=100_000)
    parser.add_argument("--sac-log-interval", type=int, default=2000)
    parser.add_argument("--sync-samplers", nargs="+", choices=("serial", "cpu", "gpu"),
                        help="sync layouts (default: serial cpu; cuda: cpu gpu)")
    parser.add_argument("--sync-threads", type=int, nargs="+", default=[1],
                        help="torch threads of the sync master, one contender per value "
                             "(default 1, the presets' choice)")
    parser.add_argument("--async-sampler", choices=("serial", "cpu"), default="serial",
                        help="async sampler with --device cpu (cuda: cpu)")
    parser.add_argument("--no-throttle", action="store_true",
                        help="run the async contenders without sampler_throttle")
    parser.add_argument("--no-pin", action="store_true",
                        help="affinity codes with 0saf: no process is pinned to its cores "
                             "(torch threads are still set)")
    parser.add_argument("--quiet-wait", type=float, default=0.0, metavar="S",
                        help="before each run, wait up to S seconds for the load of other "
                             "processes to drop below --quiet-load cores (default 0: no wait)")
    parser.add_argument("--quiet-load", type=float, default=0.3)
    parser.add_argument("--target", type=float, default=1.3,
                        help="the async / sync env steps/s target for DQN on Pong")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a preset override for every run, as rlfast train's --set (e.g. "
                             "algo.replay_device=device); repeatable")
    parser.add_argument("--async-set", action="append", default=[], metavar="KEY=VALUE",
                        help="a preset override for the async runs only, after --set (e.g. "
                             "algo.replay_device=auto); repeatable")
    parser.add_argument("--runners", nargs="+", choices=("sync", "async"),
                        default=["sync", "async"],
                        help="the DQN and SAC comparisons' contenders to run (default both)")
    parser.add_argument("--keep-going", action="store_true",
                        help="a contender that fails is reported and left out, the others run "
                             "on (exit status 1 at the end)")
    parser.add_argument("--quick", action="store_true",
                        help="smoke test: 1 round, 0.5 s windows, tiny replay buffers, "
                             "every child forked from this process (no interpreter start-up)")
    parser.add_argument("--json", metavar="OUT", help="write every run and the summary here")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    return parser, parser.parse_args(argv)


def check_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """``--quick``'s settings in place; a one-line error for settings that cannot run."""
    if args.quick:
        args.rounds, args.seconds, args.warmup, args.sync_threads = 1, 0.5, 0.0, [1]
        args.dqn_replay_ratios = args.dqn_replay_ratios[-1:]
        args.dqn_min_steps_learn, args.dqn_replay_size, args.dqn_batch_B = 128, 4096, 1
        args.sac_min_steps_learn, args.sac_replay_size = 200, 4096
        preload_child_modules()
    if args.rounds < 1 or args.seconds <= 0 or args.warmup < 0:
        parser.error("--rounds must be >= 1, --seconds > 0, --warmup >= 0")
    if args.device == "cuda":
        import torch
        if not torch.cuda.is_available():
            parser.error("--device cuda: no CUDA device is available")


def print_header(args: argparse.Namespace, specs: list[dict]) -> None:
    """The machine, the settings every run shares and each comparison's own."""
    throttle = any(s["throttle"] for s in specs)
    print(f"Machine: {machine()}")
    print(f"Device {args.device}; {args.rounds} rounds, interleaved; window {args.seconds:g} s "
          f"per run, opening {args.warmup:g} s after the first update; sync master torch "
          f"threads {' / '.join(map(str, args.sync_threads))}, async optimizer 1; async "
          f"contenders sampler_throttle={throttle}; processes pinned: {not args.no_pin}"
          + (f"; --set {' '.join(args.set)}" if args.set else "")
          + (f"; async --set {' '.join(args.async_set)}" if args.async_set else ""))
    for group in dict.fromkeys(s["group"] for s in specs):
        s = next(x for x in specs if x["group"] == group)
        print(f"  {group if group != 'copier' else 'copier (dqn)'}: replay_ratio "
              f"{s['replay_ratio']:g}, sampler batch_T {s['batch_T']} x batch_B {s['batch_B']}, "
              f"min_steps_learn {s['min_steps_learn']}, replay_size {s['replay_size']}")
    print(flush=True)


def run_rounds(args: argparse.Namespace, specs: list[dict]) -> tuple[dict, dict]:
    """Every contender once a round, interleaved: (the runs by contender, the error of each
    one that failed, left out of the later rounds with ``--keep-going``)."""
    timeout = 300 + 3 * (args.seconds + args.warmup)
    results: dict[str, list[dict]] = {s["name"]: [] for s in specs}
    failed: dict[str, str] = {}
    for r, order in interleave(specs, args.rounds):
        for spec in order:
            if spec["name"] in failed:
                continue
            waited = wait_for_quiet(args.quiet_wait, args.quiet_load)
            try:
                res = run_contender(spec, timeout, fork=args.quick)
            except RuntimeError as error:
                if not args.keep_going:
                    raise
                failed[spec["name"]] = str(error)[-3000:]
                print(f"  round {r + 1} {spec['name']} FAILED (left out): {error}", flush=True)
                continue
            res["quiet_wait_s"] = waited
            results[spec["name"]].append(res)
            if args.json:  # what finished so far survives a run that is cut short
                write_json(args.json, dict(args=vars(args), specs=specs, runs=results,
                                           failed=failed, summary=None))
            flag = " *" if off_ratio(dict(res)) else ""
            print(f"  round {r + 1} {spec['name']:<42} {res['env_sps']:>8,.1f} steps/s "
                  f"{res['ups']:>7,.2f} updates/s  ratio {res['ratio']:.2f}{flag}  optim busy "
                  f"{100 * res['optim_busy']:3.0f}%  CPU {res['cpu_master']:.2f} + "
                  f"{res['cpu_children']:.2f}, others {res['cpu_other']:.2f}, wait "
                  f"{res['wait_master']:.2f} / {res['wait_children']:.2f}"
                  + (f"  [{res['affinity_code']}]" if res.get("affinity_code") else ""),
                  flush=True)
    return results, failed


def main(argv: list[str] | None = None) -> int:
    parser, args = parse_args(argv)
    if args.child:
        print_result(run_child(json.loads(args.child)))
        return 0
    check_args(parser, args)
    specs = contenders(args)
    print_header(args, specs)
    start = time.time()
    results, failed = run_rounds(args, specs)
    if failed:
        specs = [s for s in specs if s["name"] not in failed]
        results = {name: runs for name, runs in results.items() if name not in failed}
    summary = summarize(specs, results)
    print_table(specs, results, summary, args)
    print(f"\nTotal time {time.time() - start:.0f} s")
    bad = [(name, k) for name, runs in results.items() for r in runs for k in FIGURES
           if not (math.isfinite(r[k]) and r[k] > 0)]
    if args.json:
        write_json(args.json, dict(args=vars(args), specs=specs, runs=results, failed=failed,
                                   summary=summary))
    if bad:
        print(f"Non-finite or non-positive figures: {bad}")
        return 1
    if failed:
        print(f"Failed and left out: {', '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
