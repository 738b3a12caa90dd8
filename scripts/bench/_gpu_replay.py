"""The pure parts of scripts/bench/bench_gpu.sh's replay section (issue 38; no processes, no GPU):
its plan of measurements, the steady window of an ``rlfast train`` run's progress.csv after
learning starts, the choice of the overrides this rlfast accepts, and the section's tables
with their ratios and acceptance verdicts. scripts/bench/_gpu_replay_run.py runs the plan.

Measured: DQN on ``atari:pong`` at the preset's replay ratio 8 (batch 32) through
scripts/bench/bench_async.py (sync with the cpu and the gpu sampler, async), against a CleanRL-style
DQN loop; SAC on ``HalfCheetah-v5`` at LeanRL's settings through ``rlfast train sac``,
against a CleanRL-style and a LeanRL-style loop (scripts/bench/_cleanrl_replay.py); rlfast
with ``algo.replay_device`` device / prefetch (and host) and ``algo.compile`` on and off.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import _gpu_plan as plan
from _common import number, verdict

TARGET_DQN_UPS = 1000.0    # DQN Pong sync, batch 32, replay ratio 8: updates/s (was 156)
TARGET_DQN_ASYNC = 1.3     # async env steps/s / best sync (was 0.81x)
TARGET_SAC_SPS = 725.0     # SAC HalfCheetah-v5: LeanRL's H100 env steps/s (CleanRL: 127)
WAS = dict(dqn_ups=156.0, dqn_async=0.81, cleanrl_sac=127.0)
PEERS = ("cleanrl", "leanrl")
DQN_REPLAY_RATIO = 8.0
ACCEPTED_KEYS = ("replay_device", "compile")


def build_replay_plan(devices: Sequence[str], dqn_window: float,
                      sac_window: float) -> list[plan.Item]:
    """The replay section in priority order: what the acceptance figures need first (rlfast
    DQN sync and async with the first of ``devices``, rlfast SAC with it, the SAC peers, the
    DQN peer), then the other replay devices, ``algo.compile``, and the host replay last (the
    old default, a baseline). An rlfast DQN item's ``runs``: 3, sync with the cpu and the gpu
    sampler and async; 2, the best sync sampler so far and async; 1, that sync run alone. An
    async run's optimizer is the only process to touch its replay (copier=optimizer, one
    optimizer rank), so it keeps the replay where ``replay_device`` says, as a sync run."""
    first, rest = devices[0], list(devices[1:])

    def rlfast(kind: str, device: str, compile: bool = False, runs: int = 1) -> plan.Item:
        sets = (f"algo.replay_device={device}",) + (("algo.compile=True",) if compile else ())
        return plan.Item(kind, f"rlfast-{device}" + ("-compile" if compile else ""),
                         runs=runs, window=dqn_window if kind == "dqn" else sac_window,
                         sets=sets, tags=("compile",) if compile else ())

    items = [rlfast("dqn", first, runs=3), rlfast("sac", first),
             plan.Item("sac", "leanrl", window=sac_window, tags=("compile",)),
             plan.Item("sac", "cleanrl", window=sac_window),
             plan.Item("dqn", "cleanrl", window=dqn_window)]
    for device in rest:
        items += [rlfast("sac", device), rlfast("dqn", device, runs=1 if device in (
            "prefetch", "auto") else 2)]
    items += [rlfast("sac", d, compile=True) for d in devices]
    items.append(rlfast("dqn", first, compile=True, runs=2))
    if "host" not in devices:
        items += [rlfast("sac", "host"), rlfast("dqn", "host", runs=2)]
    return items


def effective_sets(sets: Sequence[str], accepted: dict) -> tuple[list[str], list[str]]:
    """(the ``KEY=VALUE`` overrides whose ``algo.`` key this rlfast's preset has, those it
    lacks). ``accepted``: {key: bool} for the keys of ``ACCEPTED_KEYS`` (others pass)."""
    keep, drop = [], []
    for item in sets:
        key = item.split("=", 1)[0].removeprefix("algo.")
        (keep if accepted.get(key, True) else drop).append(item)
    return keep, drop


# ---- rlfast train's progress.csv: env steps/s once learning runs steadily -------------------

def progress_points(rows: Sequence[dict]) -> list[tuple[float, float, float]]:
    """(env steps, training seconds, gradient updates), cumulative, per progress.csv row
    (plan.read_progress's rows; rows without the three columns are left out)."""
    if not rows:
        return []
    keys = [plan._column(rows[0], (name,)) for name in ("CumSteps", "CumTime (s)",
                                                           "CumUpdates")]
    if None in keys:
        return []
    out = [tuple(row[k] for k in keys) for row in rows]
    return [p for p in out if not any(math.isnan(v) for v in p)]


def steady_window(points: Sequence[tuple], warmup: float, seconds: float,
                  speedup: float = 1.25) -> dict | None:
    """The window over which to measure a run past learning start. Learning starts at the last
    row with no update yet; the window opens at the end of the first row that lies ``warmup``
    training seconds past it and is followed by a row no more than ``speedup`` times faster
    than itself (compilation and graph capture over); it closes at the first row ``seconds``
    later. Returns env steps/s, updates/s and its rows (``complete``: False while shorter than
    ``seconds``); None before it opens."""
    learn = max((i for i, p in enumerate(points) if p[2] == 0), default=None)
    if learn is None or learn + 2 >= len(points):
        return None
    t_learn = points[learn][1]

    def rate(i: int) -> float:
        dt = points[i][1] - points[i - 1][1]
        return (points[i][0] - points[i - 1][0]) / dt if dt > 0 else math.inf

    start = next((i for i in range(learn + 1, len(points) - 1)
                  if points[i][1] - t_learn >= warmup and rate(i + 1) <= speedup * rate(i)),
                 None)
    if start is None:
        return None
    end = next((i for i in range(start + 1, len(points))
                if points[i][1] - points[start][1] >= seconds), len(points) - 1)
    (s0, t0, u0), (s1, t1, u1) = points[start], points[end]
    if t1 <= t0:
        return None
    return dict(start_row=start, end_row=end, window_s=t1 - t0, steps=s1 - s0,
                updates=u1 - u0, env_sps=(s1 - s0) / (t1 - t0), ups=(u1 - u0) / (t1 - t0),
                complete=t1 - t0 >= seconds, learn_row=learn)


# ---- the tables ------------------------------------------------------------------------------

def _util(samples, data) -> str:
    """The mean GPU utilisation over a measurement's window, as a table cell."""
    u = plan.window_utilisation(samples, data)
    return number(u and u["gpu_util"], 1)


def _settings(sets: Sequence[str]) -> tuple[str, str]:
    """(replay_device, compile) columns of an rlfast row from the overrides it ran with."""
    sets = dict(s.split("=", 1) for s in sets)
    device = sets.get("algo.replay_device", "default")
    return device, "on" if sets.get("algo.compile") == "True" else "off"


def _off(run: dict) -> bool:
    """A DQN run whose achieved replay ratio is more than 5% off its target."""
    target = run.get("target_ratio")
    return bool(target and run.get("ratio") is not None
                and abs(run["ratio"] / target - 1.0) > 0.05)


def _status(outcomes: dict, key: str) -> str:
    status = outcomes.get(key, "not run")
    return "skipped" if status.startswith("skipped") else status.split(":")[0]


def dqn_table(args, items, outcomes, results, samples) -> tuple[list[str], dict]:
    """One row per rlfast contender (sync cpu / sync gpu / async of each variant) and the
    CleanRL-style loop; the acceptance lines (the best sync run's updates/s; the best async
    run's env steps/s over the best sync run's); the variant with the best sync updates/s."""
    lines = [f"### DQN on atari:pong: batch 32, replay ratio {DQN_REPLAY_RATIO:g} (async: "
             f"sampler throttled to it), one {args.dqn_seconds:g} s window from "
             f"{args.dqn_warmup:g} s after learning starts ({args.dqn_learning_starts:,} steps), "
             f"device {args.device}", "",
             "| contender | replay_device | compile | env steps/s | updates/s | replay ratio "
             "| GPU util % | note |", "|---|---|---|---:|---:|---:|---:|---|"]
    syncs, asyncs, variants = [], [], {}
    for item in (i for i in items if i.kind == "dqn"):
        data = results.get(item.key) or {}
        if item.name == "cleanrl":
            ratio = 32 * data["ups"] / data["env_sps"] if data.get("env_sps") else None
            lines.append(f"| cleanrl ({data.get('n_envs', 1)} env, host numpy replay) | host "
                         f"| off | {number(data.get('env_sps'))} | {number(data.get('ups'))} "
                         f"| {number(ratio, 2)} | {_util(samples, data)} "
                         f"| {'' if data else _status(outcomes, item.key)} |")
            continue
        runs = data.get("contenders") or []
        if not runs:
            device, compile = _settings(data.get("sets", item.sets))
            lines.append(f"| {item.name} | {device} | {compile} | {_status(outcomes, item.key)} "
                         f"| | | | {data.get('note', '')} |")
            continue
        for r in runs:
            device, compile = _settings(r.get("sets", data.get("sets", item.sets)))
            label = f"{item.name} {r['runner']} {r['sampler']}"
            lines.append(f"| {label} | {device} | {compile} | {number(r['env_sps'])} "
                         f"| {number(r['ups'])} | {number(r['ratio'], 2)}{' *' if _off(r) else ''} "
                         f"| {_util(samples, r)} | {data.get('note', '')} |")
            (syncs if r["runner"] == "sync" else asyncs).append((label, r))
            if r["runner"] == "sync":
                variants[item.name] = max(variants.get(item.name, 0.0), r["ups"])
        for name, error in (data.get("failed") or {}).items():
            lines.append(f"| {item.name} {name} | | | failed | | | | {error} |")
    lines.append("")
    verdicts = {}
    target = f"Acceptance, DQN sync >= {TARGET_DQN_UPS:,.0f} updates/s (was {WAS['dqn_ups']:g})"
    if syncs:
        label, r = max(syncs, key=lambda x: x[1]["ups"])
        verdicts["dqn_sync_ups"] = r["ups"]
        lines.append(f"{target}: best {label} {r['ups']:,.0f} -> "
                     f"{verdict(r['ups'] >= TARGET_DQN_UPS)}")
    else:
        lines.append(f"{target}: not measured")
    target = (f"Acceptance, DQN async >= {TARGET_DQN_ASYNC:g}x the best sync env steps/s (was "
              f"{WAS['dqn_async']:g}x)")
    if syncs and asyncs:
        (s_label, s_run), (a_label, a_run) = (max(runs, key=lambda x: x[1]["env_sps"])
                                              for runs in (syncs, asyncs))
        ratio = a_run["env_sps"] / s_run["env_sps"]
        verdicts["dqn_async_ratio"] = ratio
        lines.append(f"{target}: best {a_label} {a_run['env_sps']:,.0f} / best {s_label} "
                     f"{s_run['env_sps']:,.0f} = {ratio:.2f}x -> "
                     f"{verdict(ratio >= TARGET_DQN_ASYNC)}"
                     + (" (not at equal replay ratio: *)" if _off(a_run) else ""))
    else:
        lines.append(f"{target}: not measured")
    if any(_off(r) for _, r in syncs + asyncs):
        lines.append("* replay ratio more than 5% off its target (an async optimizer that "
                     "fell behind its throttled sampler): env steps/s not at equal ratio")
    peer = results.get(plan.Item("dqn", "cleanrl").key) or {}
    if syncs and peer.get("env_sps"):
        best = max(r["env_sps"] for _, r in syncs + asyncs)
        lines.append(f"best rlfast / cleanrl env steps/s: {best / peer['env_sps']:.2f}x")
    if variants:
        lines.append("By sync updates/s: " + ", ".join(
            f"{k} {v:,.0f}" for k, v in sorted(variants.items(), key=lambda kv: -kv[1]))
                     + f" -> default on CUDA by measurement: {max(variants, key=variants.get)}")
    lines.append("")
    return lines, verdicts


def sac_table(args, items, outcomes, results, samples) -> tuple[list[str], dict]:
    """One row per rlfast variant and peer; the acceptance line and the ratios to the
    peers measured here."""
    lines = [f"### SAC on {args.sac_env}: 1 env, one update of batch 256 per env step, env "
             f"steps/s over a {args.sac_seconds:g} s window from {args.sac_warmup:g} s after "
             f"learning starts ({args.sac_learning_starts:,} steps) and compilation, device "
             f"{args.device}", "",
             "| contender | replay_device | compile | env steps/s | updates/s | window s "
             "| GPU util % | note |", "|---|---|---|---:|---:|---:|---:|---|"]
    rlfast = {}
    for item in (i for i in items if i.kind == "sac"):
        data = results.get(item.key) or {}
        if item.name in PEERS:
            device, compile = "device (torch)" if item.name == "leanrl" else "host", "off"
            if item.name == "leanrl" and data:
                compile = "on" if data.get("compiled") else "off"
                graphs = data.get("cuda_graphs") or {}
                compile += ", CUDA graphs: " + (", ".join(k for k, v in graphs.items() if v)
                                                or "none")
            note = data.get("note") or ("; ".join(f"{k}: {v}" for k, v in
                                                  (data.get("graph_fallbacks") or {}).items()))
        else:
            device, compile = _settings(data.get("sets", item.sets))
            note = data.get("note", "")
            if data.get("env_sps") and not data.get("complete", True):
                note = (note + "; " if note else "") + "window shorter than asked"
        if not data.get("env_sps"):
            note = _status(outcomes, item.key)
        elif item.name not in PEERS:
            rlfast[item.name] = data["env_sps"]
        lines.append(f"| {item.name} | {device} | {compile} | {number(data.get('env_sps'))} "
                     f"| {number(data.get('ups'))} | {number(data.get('window_s'), 1)} "
                     f"| {_util(samples, data)} | {note} |")
    lines.append("")
    verdicts = {}
    if rlfast:
        name = max(rlfast, key=rlfast.get)
        verdicts["sac_env_sps"] = rlfast[name]
        lines.append(f"Acceptance, SAC >= {TARGET_SAC_SPS:,.0f} env steps/s (LeanRL's H100 "
                     f"figure; CleanRL's {WAS['cleanrl_sac']:g}): best {name} "
                     f"{rlfast[name]:,.0f} -> {verdict(rlfast[name] >= TARGET_SAC_SPS)}")
        for peer in PEERS:
            value = (results.get(plan.Item("sac", peer).key) or {}).get("env_sps")
            if value:
                lines.append(f"best rlfast / {peer} (measured here, {value:,.0f}): "
                             f"{rlfast[name] / value:.2f}x")
        lines.append("By env steps/s: " + ", ".join(
            f"{k} {v:,.0f}" for k, v in sorted(rlfast.items(), key=lambda kv: -kv[1]))
                     + f" -> default on CUDA by measurement: {name}")
    else:
        lines.append(f"Acceptance, SAC >= {TARGET_SAC_SPS:,.0f} env steps/s: not measured")
    lines += ["rlfast SAC runs its preset for the env (one learning rate 3e-4 for actor, critics "
              "and temperature; an actor step with every critic step); the peers LeanRL's "
              "(critics and temperature 1e-3, two actor steps every second step): the same "
              "number of gradient steps per env step.", ""]
    return lines, verdicts


def replay_tables(args, items, outcomes, results, samples, accepted) -> tuple[list[str], dict]:
    """The replay section: which overrides this rlfast accepts, the DQN and SAC tables."""
    if not any(i.kind in plan.REPLAY_KINDS for i in items):
        return [], {}
    lines = ["## Replay-based learning (issue 38)", ""]
    if accepted:
        lines.append("Overrides accepted by this rlfast's presets: " + "; ".join(
            f"{algo}: " + ", ".join(f"algo.{k} {'yes' if ok else 'NO'}" for k, ok in keys.items())
            for algo, keys in accepted.items()))
        lines.append("")
    verdicts = {}
    for part in (dqn_table(args, items, outcomes, results, samples),
                 sac_table(args, items, outcomes, results, samples)):
        lines += part[0]
        verdicts.update(part[1])
    return lines, verdicts
