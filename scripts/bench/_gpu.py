#!/usr/bin/env python
"""Every GPU figure of issues 37 and 38 in one run within a wall-clock budget: what
scripts/bench/bench_gpu.sh runs once the packages are in place (see that script for the figures and
the budget). ``--section`` picks the PPO section (issue 37, the default), the replay section
(issue 38: ``--replay-only``; scripts/bench/_gpu_replay.py plans it, _gpu_replay_run.py
runs it) or both (longer than one call of the GPU machine allows).

PPO measurements (scripts/bench/_gpu_plan.py plans them, in priority order): PPO training env
steps/s of scripts/bench/bench_atari_train.py's contenders at several env counts, one child process
each; the sampler table of scripts/bench/bench_sampler.py (random and Nature-CNN agent per sampler);
a Pong learning run of ``rlfast train ppo atari:pong`` stopped when its mean training return
reaches the target or its time is up; nvidia-smi's utilisation sampled throughout and lined
up with each measurement's window. Tables go to stdout and ``--out``/bench_gpu.md, the raw
figures to bench_gpu.json, the samples to gpu_util.csv, the learning run's progress.csv and
console output beside them.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _gpu_plan as plan  # noqa: E402
import _gpu_replay as replay  # noqa: E402
from _common import REPO_ROOT, child_env, run_process, stop_group  # noqa: E402
from _gpu_replay_run import ReplayRuns  # noqa: E402
from _gpu_report import write_report  # noqa: E402

BENCH = os.path.dirname(os.path.abspath(__file__))


# ---- GPU utilisation ------------------------------------------------------------------------

class GpuMonitor:
    """nvidia-smi sampling utilisation every 500 ms in the background (line-buffered through
    stdbuf where it exists); ``samples`` are parsed lines. Without nvidia-smi it does
    nothing and ``note`` says so."""

    def __init__(self):
        self.samples: list[tuple] = []
        self.lines: list[str] = []
        self.proc = None
        self.note = None
        smi = shutil.which("nvidia-smi")
        if smi is None:
            self.note = "nvidia-smi not found: no GPU utilisation"
            return
        cmd = [smi, f"--query-gpu={plan.SMI_QUERY}", "--format=csv,noheader,nounits",
               "-lms", "500", "-i", "0"]
        if shutil.which("stdbuf"):
            cmd = ["stdbuf", "-oL"] + cmd
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     text=True, start_new_session=True)
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))
            sample = plan.parse_smi_line(line)
            if sample is not None:
                self.samples.append(sample)

    def stop(self) -> None:
        if self.proc is not None:
            stop_group(self.proc, grace=3.0)
            self.thread.join(timeout=5.0)
            if not self.samples:
                self.note = "nvidia-smi gave no samples"


# ---- the measurements -------------------------------------------------------------------------

class Runner:
    """Runs one planned item and keeps its figures (``results`` by item key)."""

    def __init__(self, args: argparse.Namespace, work: str):
        self.args, self.work = args, work
        self.results: dict[str, dict] = {}
        self.sampler_peer_done = False
        self.replay = ReplayRuns(args, work, self.results)

    def __call__(self, item: plan.Item, timeout: float) -> str:
        if item.kind in plan.REPLAY_KINDS:
            return self.replay(item, timeout)
        return getattr(self, "run_" + item.kind)(item, timeout)

    def run_train(self, item: plan.Item, timeout: float) -> str:
        import bench_atari_train as bat

        a = self.args
        _, ns = bat.parse_args(["--envs", str(item.envs), "--steps-per-env",
                                str(a.steps_per_env), "--seconds", str(a.seconds),
                                "--warmup", str(a.warmup), "--device", a.device, "--rounds", "1",
                                "--seed", str(a.seed), "--dqn-envs", "2"])
        outcome, payload = bat.run_contender(item.name, ns, timeout=timeout)
        if outcome == "ok":
            self.results[item.key] = dict(payload, contender=item.name)
            return "ok"
        if outcome == "skipped":
            return f"skipped: {payload}"
        self.results[item.key] = dict(error=payload[-4000:])
        print(f"{item.key} FAILED:\n{payload[-2000:]}", file=sys.stderr, flush=True)
        return "failed: " + (payload.splitlines() or ["?"])[0][:120].rstrip(":")

    def run_sampler(self, item: plan.Item, timeout: float) -> str:
        a = self.args
        out = os.path.join(self.work, f"sampler_{item.name}_{item.envs}.json")
        peers = [] if self.sampler_peer_done else ["ale"]
        cmd = [sys.executable, os.path.join(BENCH, "bench_sampler.py"), "--samplers",
               item.name, "--agents", "random", "nature_cnn", "--obs-type", "84x84",
               "--envs", str(item.envs), "--seconds", str(a.seconds), "--batch-T",
               str(a.sampler_batch_T), "--device", a.device, "--json", out, "--peers", *peers]
        returncode, stdout, stderr = run_process(cmd, timeout)
        if returncode is None:
            return f"failed: did not finish within {timeout:.0f} s"
        if returncode != 0 or not os.path.exists(out):
            text = stdout + stderr
            self.results[item.key] = dict(error=text[-4000:])
            print(f"{item.key} FAILED:\n{text[-2000:]}", file=sys.stderr, flush=True)
            return f"failed: exit {returncode}"
        with open(out) as f:
            self.results[item.key] = json.load(f)
        self.sampler_peer_done = True
        return "ok"

    def learn_device_flags(self) -> list[str]:
        """``--learn-device-flags`` when given; else ``--device DEVICE`` when this rlfast's
        ``train`` has the option, else (CUDA) an affinity code with one GPU."""
        a = self.args
        if a.learn_device_flags is not None:
            return shlex.split(a.learn_device_flags)
        probe = subprocess.run([sys.executable, "-m", "rlfast", "train", "--help"],
                               capture_output=True, text=True, env=child_env(), cwd=REPO_ROOT)
        if "--device" in probe.stdout:
            return ["--device", a.device]
        if a.device == "cuda":
            cores = len(os.sched_getaffinity(0))
            return ["--affinity", f"0slt_{cores}cpu_1gpu_0hto"]
        return []

    def run_learn(self, item: plan.Item, timeout: float) -> str:
        a = self.args
        log_dir = os.path.join(self.work, "learn")
        cmd = [sys.executable, "-m", "rlfast", "train", "ppo", "atari:pong", "--n-envs",
               str(a.learn_envs), "--seed", str(a.seed), "--log-dir", log_dir, "--no-progress",
               "--snapshot-mode", "none", "--set", "sampler.eval_n_envs=1", "--set",
               "sampler.eval_max_steps=1", "--set",
               f"runner.log_interval_steps={a.learn_log_interval}"]
        if a.learn_steps:
            cmd += ["--steps", str(a.learn_steps)]
        cmd += self.learn_device_flags() + shlex.split(a.learn_flags)
        cap = min(a.learn_seconds, timeout)
        print("$ " + " ".join(shlex.quote(c) for c in cmd), flush=True)
        console = open(os.path.join(self.work, "learn_console.log"), "w")
        t0 = time.time()
        proc = subprocess.Popen(cmd, stdout=console, stderr=subprocess.STDOUT, text=True,
                                env=child_env(), cwd=REPO_ROOT, start_new_session=True)
        progress = os.path.join(log_dir, "progress.csv")
        hit, reason, last_print = None, None, t0
        try:
            while True:
                finished = proc.poll() is not None
                points = self._points(progress)
                hit = plan.first_reaching(points, a.target_return, a.min_episodes)
                now = time.time()
                if hit is not None:
                    hit["wall_s"], reason = now - t0, "target reached"
                    break
                if finished:
                    reason = f"rlfast train exited ({proc.returncode})"
                    break
                if now - t0 >= cap:
                    reason = f"time limit ({cap:.0f} s)"
                    break
                if now - last_print >= 30 and points:
                    last_print = now
                    print(f"  learn: {now - t0:.0f} s, {points[-1]['steps']:,.0f} steps, "
                          f"latest mean training return {points[-1]['mean_return']:.2f}",
                          flush=True)
                time.sleep(0.5)
        finally:
            stop_group(proc, grace=30.0)
            console.close()
        points = self._points(progress)
        rolling = plan.rolling_return(points, a.min_episodes)
        finite = [r for r in rolling if r == r]
        self.results[item.key] = dict(
            command=cmd, seed=a.seed, envs=a.learn_envs, target=a.target_return,
            min_episodes=a.min_episodes, stop_reason=reason, hit=hit, wall_s=time.time() - t0,
            t_start=t0, t_end=time.time(), exit_code=proc.returncode,
            steps=points[-1]["steps"] if points else 0,
            train_s=points[-1]["train_s"] if points else 0,
            steady_steps_per_s=plan.steady_steps_per_s(points, a.learn_skip_s),
            best_rolling_return=max(finite) if finite else None,
            last_rolling_return=finite[-1] if finite else None,
            episodes=sum(p["episodes"] for p in points if p["episodes"] == p["episodes"]))
        if os.path.exists(progress):
            shutil.copy(progress, os.path.join(self.args.out, "learn_progress.csv"))
        shutil.copy(os.path.join(self.work, "learn_console.log"),
                    os.path.join(self.args.out, "learn_console.log"))
        if not points:
            return f"failed: no progress rows ({reason}; see learn_console.log)"
        return "ok"

    @staticmethod
    def _points(path: str) -> list[dict]:
        try:
            with open(path) as f:
                return plan.training_returns(plan.read_progress(f.read()))
        except FileNotFoundError:
            return []


# ---- main -------------------------------------------------------------------------------------

SECTIONS = ("ppo", "replay", "all")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dry-run", action="store_true",
                   help="the whole run at tiny sizes on the CPU (a few minutes)")
    p.add_argument("--device", choices=("cuda", "cpu"), default=None,
                   help="default cuda (--dry-run: cpu)")
    p.add_argument("--budget", type=float, default=None,
                   help="wall seconds for everything (default 480; --dry-run 240)")
    p.add_argument("--warmup", type=float, default=None,
                   help="seconds after a contender's first update before its window (default "
                        "2; --dry-run 0.5)")
    p.add_argument("--seconds", type=float, default=None,
                   help="a contender's measured window (default 6; --dry-run 1.5)")
    p.add_argument("--envs", type=int, nargs=3, default=None, metavar=("SMALL", "MAIN", "BIG"),
                   help="env counts (default 8 32 64; --dry-run 2 4 0; 0: none)")
    p.add_argument("--steps-per-env", type=int, default=None,
                   help="PPO batch_T (default 128; --dry-run 32)")
    p.add_argument("--sampler-batch-T", type=int, default=None,
                   help="bench_sampler batch_T (default 64; --dry-run 16)")
    p.add_argument("--learn-seconds", type=float, default=None,
                   help="the learning run's limit (default 300; --dry-run 45)")
    p.add_argument("--learn-envs", type=int, default=None, help="default 32 (--dry-run 4)")
    p.add_argument("--learn-steps", type=int, default=None,
                   help="--steps of the learning run (default: the preset's; --dry-run 6000)")
    p.add_argument("--learn-log-interval", type=int, default=None,
                   help="env steps per progress row (default 16384; --dry-run 512)")
    p.add_argument("--learn-device-flags", default=None,
                   help="flags putting the learner on the device (default: probed)")
    p.add_argument("--learn-flags", default="", help="more flags for rlfast train")
    p.add_argument("--learn-skip-s", type=float, default=None,
                   help="training seconds left out of the learning run's steps/s (default 30; "
                        "--dry-run 0)")
    p.add_argument("--target-return", type=float, default=18.0)
    p.add_argument("--min-episodes", type=int, default=None,
                   help="episodes the mean training return averages at least (default 32; "
                        "--dry-run 1)")
    p.add_argument("--no-learn", action="store_true", help="throughput only")
    p.add_argument("--section", choices=SECTIONS, default="ppo",
                   help="ppo: issue 37's PPO figures (default); replay: issue 38's DQN and SAC "
                        "figures; all: both (more than one 10-minute call)")
    p.add_argument("--replay-only", action="store_true", help="= --section replay")
    p.add_argument("--replay-devices", nargs="+", default=["device", "prefetch"],
                   metavar="WHERE", help="algo.replay_device values measured, the first first "
                                         "(default: device prefetch; host is measured last)")
    p.add_argument("--dqn-seconds", type=float, default=None,
                   help="DQN window (default 6; --dry-run 0.5)")
    p.add_argument("--dqn-warmup", type=float, default=None,
                   help="DQN seconds after learning starts before the window (default 2; "
                        "--dry-run 0)")
    p.add_argument("--dqn-learning-starts", type=int, default=None,
                   help="DQN env steps before learning (default 3000; --dry-run 128)")
    p.add_argument("--dqn-replay-size", type=int, default=None,
                   help="default 100000 (--dry-run 4096)")
    p.add_argument("--sac-env", default="HalfCheetah-v5")
    p.add_argument("--sac-seconds", type=float, default=None,
                   help="SAC window (default 10; --dry-run 1.5)")
    p.add_argument("--sac-warmup", type=float, default=None,
                   help="SAC training seconds after learning starts before the window "
                        "(default 3; --dry-run 0.5)")
    p.add_argument("--sac-learning-starts", type=int, default=None,
                   help="SAC env steps before learning (default 5000, LeanRL's; --dry-run 200)")
    p.add_argument("--sac-replay-size", type=int, default=None,
                   help="default 1000000, LeanRL's (--dry-run 10000)")
    p.add_argument("--sac-log-interval", type=int, default=None,
                   help="env steps per progress row of rlfast's SAC (default 500; --dry-run 50)")
    p.add_argument("--only", nargs="+", default=None, metavar="KEY",
                   help="run only the planned items whose key contains one of these")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None, help="folder for the tables and raw figures")
    args = p.parse_args(argv)
    dry = args.dry_run
    if args.replay_only:
        args.section = "replay"
    budgets = dict(ppo=(240.0, 480.0), replay=(240.0, 420.0), all=(420.0, 900.0))
    defaults = dict(device="cpu" if dry else "cuda", budget=budgets[args.section][not dry],
                    warmup=0.5 if dry else 2.0, seconds=1.5 if dry else 6.0,
                    envs=[2, 4, 0] if dry else [8, 32, 64], steps_per_env=32 if dry else 128,
                    sampler_batch_T=16 if dry else 64, learn_seconds=45.0 if dry else 300.0,
                    learn_envs=4 if dry else 32, learn_steps=6000 if dry else None,
                    learn_log_interval=512 if dry else 16384, min_episodes=1 if dry else 32,
                    learn_skip_s=0.0 if dry else 30.0, dqn_seconds=0.5 if dry else 6.0,
                    dqn_warmup=0.0 if dry else 2.0, dqn_learning_starts=128 if dry else 3000,
                    dqn_replay_size=4096 if dry else 100_000, sac_seconds=1.5 if dry else 10.0,
                    sac_warmup=0.5 if dry else 3.0, sac_learning_starts=200 if dry else 5000,
                    sac_replay_size=10_000 if dry else 1_000_000,
                    sac_log_interval=50 if dry else 500)
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.out is None:
        args.out = os.environ.get("OUT") or os.path.join(
            REPO_ROOT, "data", "bench_gpu", time.strftime("%Y%m%d-%H%M%S"))
    return args


def build_items(args: argparse.Namespace) -> list[plan.Item]:
    """The planned items of ``args.section``: the PPO plan, the replay plan, or both (the
    replay items right after the PPO learning run, before the rest of the PPO matrix)."""
    small, main_envs, big = args.envs
    ppo = plan.build_plan(small, main_envs, big or None) if args.section != "replay" else []
    if args.section == "ppo":
        return ppo
    items = replay.build_replay_plan(args.replay_devices, args.dqn_warmup + args.dqn_seconds,
                                     args.sac_warmup + args.sac_seconds)
    if not ppo:
        return items
    for item in items:
        item.before_learn = False
    learn = next(i for i, item in enumerate(ppo) if item.kind == "learn")
    return ppo[:learn + 1] + items + ppo[learn + 1:]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    if args.device == "cuda":
        import torch
        if not torch.cuda.is_available():
            sys.exit("--device cuda needs a GPU (use --dry-run on a machine without one)")
    items = build_items(args)
    if args.no_learn:
        items = [i for i in items if i.kind != "learn"]
    if args.only:
        items = [i for i in items if any(k in i.key for k in args.only)]
    estimator = plan.Estimator(
        warmup=args.warmup, seconds=args.seconds, overhead=10.0 if args.dry_run else 15.0,
        compile=40.0 if args.dry_run else 30.0, sampler_overhead=4.0 if args.dry_run else 6.0,
        learn_seconds=args.learn_seconds, replay_overhead=10.0 if args.dry_run else 20.0)
    budget = plan.Budget(args.budget)
    shm_before = set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()
    windows = {"ppo": f"{args.warmup:g} s warm-up + {args.seconds:g} s",
               "replay": f"DQN {args.dqn_warmup:g} + {args.dqn_seconds:g} s, SAC "
                         f"{args.sac_warmup:g} + {args.sac_seconds:g} s"}
    shown = [w for section, w in windows.items() if args.section in (section, "all")]
    print(f"Plan ({args.section}: {len(items)} items, budget {args.budget:.0f} s, device "
          f"{args.device}, windows {'; '.join(shown)}): " + ", ".join(i.key for i in items),
          flush=True)
    monitor = GpuMonitor()
    if monitor.note:
        print(monitor.note, flush=True)
    work = tempfile.mkdtemp(prefix="rlfast_bench_gpu_")
    runner = Runner(args, work)
    if any(i.kind in plan.REPLAY_KINDS for i in items):
        missing = [f"{algo}: algo.{key}" for algo, keys in runner.replay.probe().items()
                   for key, ok in keys.items() if not ok]
        if missing:
            print("Not accepted by this rlfast's presets (left out of the runs that ask for "
                  "them; a run that would repeat another is skipped): " + ", ".join(missing),
                  flush=True)
    outcomes: dict[str, str] = {}
    try:
        outcomes = plan.schedule(items, budget, estimator, runner,
                                 log=lambda line: print(line, flush=True),
                                 min_learn=30.0 if args.dry_run else 60.0)
    except KeyboardInterrupt:
        print("interrupted: reporting what was measured", flush=True)
    finally:
        monitor.stop()
        shutil.rmtree(work, ignore_errors=True)
    shm_left = sorted((set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set())
                      - shm_before)
    accepted = runner.replay.accepted
    write_report(args, items, outcomes, runner.results, monitor, budget.elapsed(), shm_left,
                 accepted)
    return 1 if any(o.startswith("failed") for o in outcomes.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
