"""The replay section of scripts/bench/bench_gpu.sh, run (scripts/bench/_gpu_replay.py plans it and
builds its tables): one child process (group) per measurement, its figures kept by item key.

- rlfast DQN on Pong: scripts/bench/bench_async.py ``--benchmarks dqn`` at replay ratio 8, one
  round, sync with the cpu and the gpu sampler and async (a later variant: its best sync sampler
  and async), with the item's overrides as ``--set``;
- rlfast SAC: ``rlfast train sac ENV`` with LeanRL's learning start and replay size and the
  item's overrides, its progress.csv read as it grows until a steady window past learning
  start is complete (scripts/bench/_gpu_replay.py's ``steady_window``), then stopped as
  Ctrl-C would;
- the peers: scripts/bench/_cleanrl_replay.py, which measures its own window.

Overrides this rlfast's presets lack (``algo.replay_device``, ``algo.compile`` while they are
being added) are left out and said so; a run that would then repeat one already made is
skipped.
"""
from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time

import _gpu_plan as plan
import _gpu_replay as replay
from _common import REPO_ROOT, child_env, run_process, stop_group

BENCH = os.path.dirname(os.path.abspath(__file__))
ENVS = dict(dqn="atari:pong", sac=None)  # sac: args.sac_env


class ReplayRuns:
    """Runs the replay items of the plan; ``results`` (shared with the other runners) gets
    each item's figures, ``accepted`` which overrides the presets take."""

    def __init__(self, args, work: str, results: dict):
        self.args, self.work, self.results = args, work, results
        self.accepted: dict[str, dict[str, bool]] = {}
        self.ran: dict[tuple, str] = {}

    def probe(self) -> dict:
        """{algo: {key: whether its preset has ``algo.<key>``}} for the keys of
        ``replay.ACCEPTED_KEYS`` (``rlfast train --set`` refuses keys the preset lacks)."""
        if not self.accepted:
            from rlfast.experiments.presets import get_preset

            for algo in ("dqn", "sac"):
                config = get_preset(algo, ENVS[algo] or self.args.sac_env)
                self.accepted[algo] = {k: k in config["algo"] for k in replay.ACCEPTED_KEYS}
        return self.accepted

    def __call__(self, item: plan.Item, timeout: float) -> str:
        if item.name in replay.PEERS:
            return self.run_peer(item, timeout)
        sets, dropped = replay.effective_sets(item.sets, self.probe()[item.kind])
        why = f"{', '.join(dropped)} not accepted by this rlfast"
        same = self.ran.get((item.kind, tuple(sorted(sets))))
        if same:
            return f"skipped: the same run as {same} ({why})"
        self.ran[(item.kind, tuple(sorted(sets)))] = item.key
        run = self.run_dqn if item.kind == "dqn" else self.run_sac
        outcome = run(item, sets, timeout)
        data = self.results.setdefault(item.key, {})
        data["sets"] = sets
        if dropped:
            data["note"] = f"ran without {why}"
        return outcome

    # ---- the children ----------------------------------------------------------------------

    def _child(self, item: plan.Item, cmd: list[str], timeout: float) -> tuple[int | None, str]:
        """Run ``cmd`` in its own process group within ``timeout``; (exit code or None on
        timeout, output)."""
        print("  $ " + " ".join(shlex.quote(c) for c in cmd), flush=True)
        returncode, stdout, stderr = run_process(cmd, timeout, cwd=REPO_ROOT)
        return returncode, stdout + stderr

    def _failed(self, item: plan.Item, code: int | None, text: str, timeout: float) -> str:
        self.results[item.key] = dict(error=text[-4000:])
        print(f"{item.key} FAILED:\n{text[-2000:]}", file=sys.stderr, flush=True)
        return (f"failed: did not finish within {timeout:.0f} s" if code is None
                else f"failed: exit {code}")

    def _best_sync_sampler(self) -> str | None:
        for key, data in self.results.items():
            syncs = [r for r in data.get("contenders", []) if r["runner"] == "sync"]
            if key.startswith("dqn:") and syncs:
                return max(syncs, key=lambda r: r["ups"])["sampler"]
        return None

    def run_dqn(self, item: plan.Item, sets: list[str], timeout: float) -> str:
        a = self.args
        out = os.path.join(self.work, f"{item.kind}_{item.name}.json")
        best = self._best_sync_sampler()
        samplers = ["cpu", "gpu"] if item.runs >= 3 or best is None else [best]
        cmd = [sys.executable, os.path.join(BENCH, "bench_async.py"), "--device", a.device,
               "--benchmarks", "dqn", "--dqn-replay-ratios", f"{replay.DQN_REPLAY_RATIO:g}",
               "--rounds", "1", "--seconds", str(a.dqn_seconds), "--warmup", str(a.dqn_warmup),
               "--dqn-min-steps-learn", str(a.dqn_learning_starts), "--dqn-replay-size",
               str(a.dqn_replay_size), "--sync-samplers", *samplers, "--keep-going",
               "--runners", "sync", *(["async"] if item.runs != 1 else []), "--json", out]
        if a.dry_run:
            cmd += ["--dqn-batch-B", "4", "--async-sampler", "cpu"]
        for s in sets:  # async runs too: their optimizer owns its replay (copier=optimizer)
            cmd += ["--set", s]
        code, text = self._child(item, cmd, timeout)
        data = {}
        if os.path.exists(out):
            with open(out) as f:
                data = json.load(f)
        contenders = []
        for spec in data.get("specs", []):
            for run in data["runs"].get(spec["name"], [])[:1]:
                contenders.append(dict(
                    name=spec["name"], runner=spec["runner"], sampler=spec["sampler"],
                    sets=spec.get("sets", sets),
                    **{k: run.get(k) for k in ("env_sps", "ups", "ratio", "target_ratio",
                                               "optim_busy", "t_start", "t_end")}))
        if not contenders:
            return self._failed(item, code, text, timeout)
        failed = {name: (error.strip().splitlines() or ["?"])[-1][:200]
                  for name, error in (data.get("failed") or {}).items()}
        self.results[item.key] = dict(contenders=contenders, command=cmd, failed=failed,
                                      comparisons=(data.get("summary") or {}).get("comparisons"))
        for name, error in (data.get("failed") or {}).items():
            print(f"{item.key}: {name} FAILED:\n{error[-2000:]}", file=sys.stderr, flush=True)
        if failed:  # the others' figures stay in the table
            return f"failed: {', '.join(failed)} (the other runs were measured)"
        return "ok"

    def run_sac(self, item: plan.Item, sets: list[str], timeout: float) -> str:
        a = self.args
        log_dir = os.path.join(self.work, f"{item.kind}_{item.name}")
        cmd = [sys.executable, "-m", "rlfast", "train", "sac", a.sac_env, "--device", a.device,
               "--seed", str(a.seed), "--log-dir", log_dir, "--no-progress", "--snapshot-mode",
               "none", "--steps", str(10 ** 8)]
        for s in [f"algo.min_steps_learn={a.sac_learning_starts}",
                  f"algo.replay_size={a.sac_replay_size}",
                  f"runner.log_interval_steps={a.sac_log_interval}", "sampler.eval_n_envs=1",
                  "sampler.eval_max_steps=1", *sets]:
            cmd += ["--set", s]
        print("  $ " + " ".join(shlex.quote(c) for c in cmd), flush=True)
        console_path = os.path.join(self.work, f"{item.kind}_{item.name}.log")
        console = open(console_path, "w")
        t0 = time.time()
        proc = subprocess.Popen(cmd, stdout=console, stderr=subprocess.STDOUT, text=True,
                                env=child_env(), cwd=REPO_ROOT, start_new_session=True)
        progress = os.path.join(log_dir, "progress.csv")
        seen: list[float] = []  # when each row was first seen (wall clock)
        window, reason = None, None
        cap = max(timeout - 25.0, 0.8 * timeout)  # leaves room to stop it
        try:
            while True:
                finished = proc.poll() is not None
                points = self._points(progress)
                seen += [time.time()] * (len(points) - len(seen))
                window = replay.steady_window(points, a.sac_warmup, a.sac_seconds)
                if window and window["complete"]:
                    reason = "window complete"
                    break
                if finished:
                    reason = f"rlfast train exited ({proc.returncode})"
                    break
                if time.time() - t0 >= cap:
                    reason = f"time limit ({cap:.0f} s)"
                    break
                time.sleep(0.25)
        finally:
            stop_group(proc, grace=15.0)
            console.close()
        with open(console_path) as f:
            text = f.read()
        if not window:
            self.results[item.key] = dict(error=text[-4000:], stop_reason=reason, command=cmd)
            print(f"{item.key}: no steady window ({reason}):\n{text[-2000:]}", file=sys.stderr,
                  flush=True)
            return f"failed: no steady window past learning start ({reason})"
        self.results[item.key] = dict(
            window, command=cmd, stop_reason=reason, wall_s=time.time() - t0,
            t_start=seen[window["start_row"]], t_end=seen[window["end_row"]])
        return "ok"

    @staticmethod
    def _points(path: str) -> list[tuple]:
        try:
            with open(path) as f:
                return replay.progress_points(plan.read_progress(f.read()))
        except FileNotFoundError:
            return []

    def run_peer(self, item: plan.Item, timeout: float) -> str:
        a = self.args
        out = os.path.join(self.work, f"{item.kind}_{item.name}.json")
        dqn = item.kind == "dqn"
        cmd = [sys.executable, os.path.join(BENCH, "_cleanrl_replay.py"), "--algo",
               item.kind, "--style", item.name, "--device", a.device, "--seed", str(a.seed),
               "--seconds", str(a.dqn_seconds if dqn else a.sac_seconds), "--warmup",
               str(a.dqn_warmup if dqn else a.sac_warmup), "--learning-starts",
               str(a.dqn_learning_starts if dqn else a.sac_learning_starts), "--buffer-size",
               str(a.dqn_replay_size if dqn else a.sac_replay_size), "--json", out]
        if not dqn:
            cmd += ["--env", a.sac_env]
        code, text = self._child(item, cmd, timeout)
        if code != 0 or not os.path.exists(out):
            return self._failed(item, code, text, timeout)
        with open(out) as f:
            self.results[item.key] = dict(json.load(f), command=cmd)
        return "ok"
