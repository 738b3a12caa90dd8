"""The tables and raw files of scripts/bench/bench_gpu.sh: the machine, the sampler table, the PPO
training table with its ratios and the issue's acceptance verdicts, the Pong learning run,
GPU utilisation, and what was skipped. ``tables`` builds the text from the figures alone
(no processes), ``write_report`` prints it and writes bench_gpu.md, bench_gpu.json and
gpu_util.csv into ``args.out``."""
from __future__ import annotations

import os

import _gpu_plan as plan
from _common import machine, number, verdict, write_json
from _gpu_replay import replay_tables

TARGET_SHARE_32 = 0.7      # PPO at the main env count: share of the random agent's steps/s
TARGET_STEPS_8 = 6800.0    # PPO at 8 envs: LeanRL's published H100 figure, env steps/s
TARGET_CNN_SHARE = 0.85    # gpu sampler: Nature-CNN agent's share of the random agent's


def sampler_table(items, outcomes, results, samples) -> tuple[list[str], dict]:
    """Frames/s per sampler with the random and the Nature-CNN agent, their ratio, and the
    GPU utilisation while the CNN agent ran; the AtariVectorEnv peer below."""
    lines, verdicts = [], {}
    rows = [i for i in items if i.kind == "sampler"]
    if not rows:
        return lines, verdicts
    envs = rows[0].envs
    lines += [f"## Sampling alone: {envs} Pong envs, frames/s (env steps x 4)", "",
              "| sampler | random agent | Nature-CNN agent | CNN / random | GPU util % (CNN) |",
              "|---|---:|---:|---:|---:|"]
    ale = None
    for item in rows:
        data = results.get(item.key, {})
        if "results" not in data:
            status = outcomes.get(item.key, "not run")
            lines.append(f"| {item.name} | {status} | | | |")
            continue
        fps = {r["agent"]: r for r in data["results"] if r.get("sampler")}
        ale = ale or next((r["fps"] for r in data["results"] if r.get("peer") == "ale"), None)
        rnd, cnn = fps.get("random"), fps.get("nature_cnn")
        ratio = cnn["fps"] / rnd["fps"] if rnd and cnn and rnd["fps"] else None
        util = plan.window_utilisation(samples, cnn)
        lines.append(f"| {item.name} | {number(rnd and rnd['fps'])} | {number(cnn and cnn['fps'])} "
                     f"| {number(ratio, 2)} | {number(util and util['gpu_util'], 1)} |")
        if item.name == "gpu":
            verdicts["gpu_cnn_share"] = ratio
    lines.append("")
    if ale:
        lines.append(f"ale-py AtariVectorEnv alone, random actions: {ale:,.0f} frames/s")
    share = verdicts.get("gpu_cnn_share")
    lines.append(f"Acceptance, gpu sampler CNN / random >= {TARGET_CNN_SHARE}: "
                 f"{number(share, 2)} -> "
                 f"{verdict(None if share is None else share >= TARGET_CNN_SHARE)}")
    lines.append("")
    return lines, verdicts


def training_table(args, items, outcomes, results, samples) -> tuple[list[str], dict]:
    """Env steps/s of every PPO contender at each env count, its share of the random agent's
    at the same count, the GPU utilisation at the main count; then the acceptance lines."""
    small, main, big = args.envs
    counts = [n for n in (small, main, big) if n]
    train = [i for i in items if i.kind == "train"]
    names = list(dict.fromkeys(i.name for i in train))

    def cell(name: str, envs: int) -> tuple[str, float | None]:
        key = plan.Item("train", name, envs).key
        data = results.get(key)
        if data and "steps_per_s" in data:
            return f"{data['steps_per_s']:,.0f}", data["steps_per_s"]
        if key in outcomes:
            status = outcomes[key]
            return ("skipped" if status.startswith("skipped") else status.split(":")[0]), None
        return "-", None

    random = {n: cell("rlfast-random", n)[1] for n in counts}
    head = " | ".join(f"{n} envs" for n in counts)
    lines = [f"## PPO training on Pong: env steps/s, {args.steps_per_env} steps x envs per batch, "
             f"4 epochs x 4 minibatches, one {args.seconds:g} s window after {args.warmup:g} s "
             f"warm-up, device {args.device}", "",
             f"| contender | {head} | share of random @{main} | GPU util % @{main} |",
             "|---|" + "---:|" * len(counts) + "---:|---:|"]
    best = {}
    for name in names:
        cells = [cell(name, n) for n in counts]
        value = dict(zip(counts, (c[1] for c in cells)))
        share = (value.get(main) / random[main] if value.get(main) and random.get(main)
                 and name != "rlfast-random" else None)
        util = plan.window_utilisation(samples, results.get(plan.Item("train", name, main).key))
        lines.append(f"| {name} | " + " | ".join(c[0] for c in cells)
                     + f" | {number(share, 2)} | {number(util and util['gpu_util'], 1)} |")
        if name.startswith("rlfast-") and name != "rlfast-random":
            for n, v in value.items():
                if v is not None and v > best.get(n, (None, -1.0))[1]:
                    best[n] = (name, v)
    lines.append("")
    peers = {peer: cell(peer, small)[1] for peer in ("leanrl-alevec", "cleanrl-alevec")}
    lean = results.get(plan.Item("train", "leanrl-alevec", small).key) or {}
    more, verdicts = _training_acceptance(small, main, best, random, peers, lean)
    return lines + more, verdicts


def _training_acceptance(small: int, main: int, best: dict, random: dict, peers: dict,
                         lean: dict) -> tuple[list[str], dict]:
    """The PPO acceptance lines from the best rlfast contender at each env count (``best``:
    {envs: (name, steps/s)}), the random agent's steps/s, the peers' at ``small`` envs and
    how the LeanRL-style loop ran; and the verdicts."""
    lines, verdicts = [], {}
    if main in best and random.get(main):
        name, v = best[main]
        share = v / random[main]
        verdicts["ppo_main_share"] = share
        lines.append(f"Acceptance, PPO {main} envs >= {TARGET_SHARE_32} of the random agent: "
                     f"best {name} {v:,.0f} / {random[main]:,.0f} = {share:.2f} -> "
                     f"{verdict(share >= TARGET_SHARE_32)}")
    else:
        lines.append(f"Acceptance, PPO {main} envs >= {TARGET_SHARE_32} of the random agent: "
                     "not measured")
    if small in best:
        name, v = best[small]
        verdicts["ppo_small_steps"] = v
        lines.append(f"Acceptance, PPO {small} envs >= {TARGET_STEPS_8:,.0f} env steps/s: best "
                     f"{name} {v:,.0f} -> {verdict(v >= TARGET_STEPS_8)}"
                     + ("" if small == 8 else " (the target is for 8 envs)"))
    for peer, v in peers.items():
        if v is not None and small in best:
            lines.append(f"{peer} at {small} envs: {v:,.0f} env steps/s; best rlfast / it = "
                         f"{best[small][1] / v:.2f}")
    if "compiled" in lean:
        lines.append(f"leanrl-alevec ran with compile={lean['compiled']}, CUDA graphs="
                     f"{lean.get('cuda_graphs')}"
                     + (f", graph fallbacks: {lean['graph_fallbacks']}"
                        if lean.get("graph_fallbacks") else ""))
    lines.append("")
    return lines, verdicts


def learning_table(args, results) -> tuple[list[str], dict]:
    data = results.get(plan.Item("learn", "pong").key)
    if not data:
        return [], {}
    hit = data.get("hit")
    lines = [f"## Pong learning run: rlfast train ppo atari:pong, {data['envs']} envs, seed "
             f"{data['seed']}, target mean training return >= {data['target']:+g} (rolling "
             f"over >= {data['min_episodes']} training episodes)", "",
             "| reached | env steps | wall s since launch | training s (CumTime) "
             "| best mean return | last mean return | episodes | env steps/s (median) "
             "| stopped by |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    at = hit or data
    lines.append(f"| {'yes' if hit else 'no'} | {number(at['steps'])} | {at['wall_s']:.0f} "
                 f"| {number(at['train_s'])} | {number(data['best_rolling_return'], 2)} "
                 f"| {number(data['last_rolling_return'], 2)} | {data['episodes']:.0f} "
                 f"| {number(data.get('steady_steps_per_s'))} | {data['stop_reason']} |")
    ok = bool(hit) and hit["wall_s"] <= 300.0
    lines += ["", f"Acceptance, Pong mean training return >= {data['target']:+g} within 300 s: "
              f"{verdict(ok)}", "Command: " + " ".join(data["command"]), ""]
    return lines, dict(learn_reached=bool(hit), learn_wall_s=hit and hit["wall_s"])


def tables(args, machine_line, items, outcomes, results, samples, monitor_note, elapsed,
           shm_left, accepted=None) -> tuple[str, dict]:
    """The whole report as Markdown text, and the verdicts. ``accepted``: which overrides
    this rlfast's presets take (the replay section)."""
    ppo = any(i.kind in ("train", "sampler", "learn") for i in items)
    replay = any(i.kind in plan.REPLAY_KINDS for i in items)
    issues = " and ".join(n for n, on in (("37", ppo), ("38", replay)) if on)
    lines = [f"# rlfast GPU figures (issue{'s' if ppo and replay else ''} {issues})", "",
             f"Machine: {machine_line}", ""]
    verdicts = {}
    parts = [sampler_table(items, outcomes, results, samples)]
    if any(i.kind == "train" for i in items) or not replay:
        parts.append(training_table(args, items, outcomes, results, samples))
    parts += [learning_table(args, results),
              replay_tables(args, items, outcomes, results, samples, accepted)]
    for part in parts:
        lines += part[0]
        verdicts.update(part[1])
    lines.append("## GPU utilisation (nvidia-smi utilization.gpu: share of time a kernel ran)")
    windows = [r for r in results.values() if isinstance(r, dict) and "t_start" in r]
    windows += [c for r in results.values() if isinstance(r, dict)
                for c in r.get("contenders", []) if c.get("t_start")]
    if monitor_note:
        lines.append(monitor_note)
    else:
        util = [plan.utilisation(samples, r["t_start"], r["t_end"]) for r in windows]
        util = [u for u in util if u]
        if util:
            n = sum(u["samples"] for u in util)
            mean = sum(u["gpu_util"] * u["samples"] for u in util) / n
            lines.append(f"Mean over the training and learning windows: {mean:.1f}% "
                         f"({n} samples); peak memory {max(u['mem_used_max'] for u in util):,.0f}"
                         " MiB")
        lines.append(f"All samples: {len(samples)}")
    lines += ["", "## Run", f"Wall time {elapsed:.0f} s of a {args.budget:.0f} s budget."]
    not_ok = {k: v for k, v in outcomes.items() if v != "ok"}
    for key, status in not_ok.items():
        lines.append(f"- {key}: {status}")
    lines.append("/dev/shm: " + (", ".join(shm_left) + " left behind" if shm_left
                                 else "nothing left behind"))
    return "\n".join(lines) + "\n", verdicts


def write_report(args, items, outcomes, results, monitor, elapsed, shm_left,
                 accepted=None) -> None:
    machine_line = machine()
    text, verdicts = tables(args, machine_line, items, outcomes, results, monitor.samples,
                            monitor.note, elapsed, shm_left, accepted)
    print("\n" + text, flush=True)
    with open(os.path.join(args.out, "bench_gpu.md"), "w") as f:
        f.write(text)
    write_json(os.path.join(args.out, "bench_gpu.json"),
               dict(machine=machine_line, settings=vars(args), outcomes=outcomes,
                    results=results, verdicts=verdicts, elapsed_s=elapsed, shm_left=shm_left,
                    gpu_util_note=monitor.note, accepted_overrides=accepted), default=str)
    if monitor.lines:
        with open(os.path.join(args.out, "gpu_util.csv"), "w") as f:
            f.write(plan.SMI_QUERY + "\n" + "\n".join(monitor.lines) + "\n")
