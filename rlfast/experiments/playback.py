"""Play a trained agent back: ``rlfast eval`` (returns over N episodes) and ``rlfast watch``
(on screen, or into an mp4 / gif video).

A run directory written by ``rlfast train`` holds ``params.json`` (algorithm, environment and the
fully resolved configuration) and snapshots. :func:`load_trained_agent` rebuilds the run's agent
and environment factory through the same :func:`~rlfast.experiments.presets.build_experiment`
that training used, so that the model, its observation preprocessing and the environment
settings (frame skip, frame stack, reward clipping, ...) are exactly those the agent learned
with, and loads the snapshot's weights into it. :func:`run_episodes` then steps one environment
with the agent in evaluation mode the way the sampler's evaluation collector does: a recurrent
state reset at every episode start and on every ``done``, the null action and a zero reward fed
to the agent after a ``done``, and an episode that ends on ``env_info.traj_done`` when the
environment gives it (Atari's episodic lives: a lost life is a ``done`` but not the end of the
game).
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from rlfast.envs.base import Env, trajectory_done
from rlfast.envs.traj_info import TrajInfo
from rlfast.experiments.device import device_label, resolve_device
from rlfast.experiments.run_dir import (RunDirError, latest_snapshot, read_run_params,
                                        reopens_run)
from rlfast.experiments.video import (_VIDEO_EXTRA, VIDEO_FORMATS, PlaybackError,  # noqa: F401
                                      VideoWriter,
                                      _import_video_writer, _video_format, _Window,
                                      _WindowClosed, check_display)
from rlfast.utils.buffer import numpify_buffer, torchify_buffer
from rlfast.utils.checks import check_int
from rlfast.utils.logging.snapshot import SnapshotCorruptError, load_snapshot
from rlfast.utils.seed import set_seed

__all__ = ["PlaybackError", "EnvFactory", "load_trained_agent", "run_episodes", "env_fps",
           "VideoWriter", "return_summary", "check_display", "add_eval_parser", "eval_main",
           "add_watch_parser", "watch_main", "MAX_EPISODE_STEPS", "VIDEO_FORMATS"]

# Steps after which an episode that has not ended is cut (an agent that balances forever in an
# environment without a time limit would otherwise never finish).
MAX_EPISODE_STEPS = 100_000
_ATARI_FPS = 60.0  # the Atari 2600's frame rate; one AtariEnv step plays frame_skip frames
_DEFAULT_FPS = 30.0


@dataclasses.dataclass
class EnvFactory:
    """Makes the run's (evaluation) environment: ``EnvCls(**env_kwargs)`` as the sampler would,
    optionally drawing RGB frames. ``TrajInfoCls`` is the sampler's trajectory statistics class
    (``AtariTrajInfo`` adds the unclipped ``GameScore``), with the algorithm's discount bound."""

    EnvCls: Callable[..., Env]
    env_kwargs: dict
    TrajInfoCls: Callable[..., TrajInfo]
    env_id: str

    def __call__(self, render: bool = False, seed: int | None = None) -> Env:
        """A new environment. ``render=True`` makes a gymnasium one with
        ``render_mode="rgb_array"`` so that ``render()`` returns frames (its env family's
        ``render_kwargs``; Atari always renders); ``seed`` seeds it (applied at its first
        reset)."""
        from rlfast.experiments.catalog import env_family

        kwargs = dict(self.env_kwargs)
        if render:  # e.g. render_mode: the keyword reaches gymnasium.make or the family's maker
            kwargs.update(env_family(self.env_id)[0].render_kwargs)
        env = self.EnvCls(**kwargs)
        if seed is not None:
            env.seed(check_int(seed, "seed", minimum=0))
        return env


@reopens_run  # imports the run's plug-ins; a missing module is one PluginImportError line
def load_trained_agent(run_dir: str | os.PathLike, snapshot: str | os.PathLike | None = None,
                       device: str | torch.device | None = None
                       ) -> tuple[dict, Any, EnvFactory]:
    """``(params, agent, make_env)`` of a run made by ``rlfast train``, ready to act.

    The experiment is rebuilt from ``params.json`` (``algo``, ``env``, ``config``, ``seed``)
    by ``build_experiment`` with the serial sampler (playback steps one environment in this
    process; recurrent agents of the alternating sampler have the same weights); its agent is
    initialized from the spaces of one environment and given the weights of ``snapshot``
    (default: the run's newest, :func:`~rlfast.experiments.run_dir.latest_snapshot`), then
    moved to ``device`` (a ``--device`` value: None or "cpu", the default, for the CPU;
    "auto" for GPU 0 when CUDA is available; "cuda"; "cuda:N"; see
    :func:`rlfast.experiments.device.resolve_device`). ``make_env`` is an
    :class:`EnvFactory` for the run's evaluation environment. ``params`` is the run's
    ``params.json`` plus ``params["snapshot"] = {"path", "itr", "cum_steps"}`` and
    ``params["agent_device"]``, where the agent now acts (``"cpu"``, ``"cuda:0"``).

    Raises :class:`~rlfast.experiments.run_dir.RunDirError` for a directory that is not a run
    or has no snapshot, ``FileNotFoundError`` for a missing ``snapshot`` file,
    ``SnapshotCorruptError`` for a damaged one, :class:`PlaybackError` for a snapshot that
    does not fit the run's agent, and ``ValueError`` for a bad ``device``.
    """
    from rlfast.experiments.presets import build_experiment

    params = read_run_params(run_dir)
    cuda_idx = resolve_device("cpu" if device is None else device)
    path = os.fspath(snapshot) if snapshot is not None else latest_snapshot(run_dir)
    state = load_snapshot(path)
    if params.get("es"):  # an evolution-strategies run: play the distribution's center
        return _load_es_solution(params, state, path)
    if "agent_state_dict" not in state:
        raise PlaybackError(f"snapshot {path} holds no agent_state_dict (its entries: "
                            f"{', '.join(sorted(state))}): not a training snapshot")
    runner = build_experiment(params["algo"], params["env"], params["config"], sampler="serial",
                              seed=params["seed"], device="cpu")  # moved to cuda_idx below
    sampler, agent = runner.sampler, runner.agent
    sampler.apply_traj_info_kwargs(runner.get_traj_info_kwargs())  # DiscountedReturn's discount
    make_env = EnvFactory(EnvCls=sampler.EnvCls, env_kwargs=dict(sampler.eval_env_kwargs),
                          TrajInfoCls=sampler.TrajInfoCls, env_id=params["env"])
    env = make_env()
    try:
        agent.initialize(env.spaces, share_memory=False, global_B=1, env_ranks=[0])
    finally:
        env.close()
    if hasattr(agent, "give_V_min_max") and hasattr(runner.algo, "V_min"):
        agent.give_V_min_max(runner.algo.V_min, runner.algo.V_max)  # categorical DQN support
    try:
        agent.load_state_dict(state["agent_state_dict"])
    except (RuntimeError, KeyError, TypeError) as e:
        raise PlaybackError(f"snapshot {path} does not fit the {type(agent).__name__} of the "
                            f"run in {os.fspath(run_dir)} ({params['algo']} on "
                            f"{params['env']}): {str(e).splitlines()[0]}") from e
    agent.to_device(cuda_idx)
    params = dict(params, snapshot=dict(path=path, itr=int(state.get("itr", 0)),
                                        cum_steps=int(state.get("cum_steps", 0))),
                  agent_device=device_label(cuda_idx))
    return params, agent, make_env


def _load_es_solution(params: dict, state: dict, path: str) -> tuple[dict, Any, EnvFactory]:
    """``load_trained_agent`` for a ``rlfast train cem|cmaes|openai_es`` run: the snapshot's
    center (the solution its evaluation rows scored) in the run's policy network."""
    from rlfast.es.policy import EsPlaybackAgent, EsPolicy
    from rlfast.experiments.catalog import env_factory

    if "center" not in state or "policy_kwargs" not in state:
        raise PlaybackError(f"snapshot {path} holds no ES solution (its entries: "
                            f"{', '.join(sorted(state))})")
    try:
        policy = EsPolicy(**state["policy_kwargs"]).load_vector(state["center"])
    except (TypeError, ValueError) as e:
        raise PlaybackError(f"snapshot {path} does not fit an ES policy: {e}") from e
    EnvCls, env_kwargs, TrajInfoCls = env_factory(params["env"], params["config"].get("env", {}))
    make_env = EnvFactory(EnvCls=EnvCls, env_kwargs=env_kwargs, TrajInfoCls=TrajInfoCls,
                          env_id=params["env"])
    params = dict(params, snapshot=dict(path=path, itr=int(state.get("itr", 0)),
                                        cum_steps=int(state.get("cum_steps", 0))),
                  agent_device="cpu")  # an ES policy plays on the CPU
    return params, EsPlaybackAgent(policy), make_env


def _render(env: Env) -> np.ndarray:
    """``env.render()``, with the reasons an environment draws no frame as PlaybackError."""
    import gymnasium

    try:
        frame = env.render()
    except (TypeError, ValueError, gymnasium.error.Error) as e:
        name = getattr(env, "name", type(env).__name__)
        raise PlaybackError(f"{name} cannot draw frames: {e}") from e
    frame = np.asarray(frame)
    if frame.ndim != 3 or frame.shape[-1] != 3:
        raise PlaybackError(f"{type(env).__name__}.render() returned an array of shape "
                            f"{frame.shape}; frames are RGB (height, width, 3)")
    return frame


def run_episodes(agent: Any, env: Env, n_episodes: int, seed: int | None = None,
                 frames: Any = None, max_steps: int | None = None,
                 TrajInfoCls: Callable[..., TrajInfo] = TrajInfo, itr: int = 1) -> list[dict]:
    """Play ``n_episodes`` episodes in ``env`` with ``agent`` in evaluation mode; return one
    dict of trajectory statistics per episode (``Return``, ``Length``, ``DiscountedReturn``,
    ..., ``GameScore`` with ``AtariTrajInfo``) plus ``Completed``: False when the episode was
    cut after ``max_steps`` (default ``MAX_EPISODE_STEPS``) steps.

    The loop is the evaluation collector's for one environment: the agent's recurrent state is
    reset at each episode start and on every ``done``, after which it sees the null action and
    a zero reward; an episode ends on ``env_info.traj_done`` when the environment reports it,
    else on ``done``. Evaluation mode is the agent's own (greedy, or low epsilon; PPO's Atari
    preset samples its policy): ``itr`` is passed to ``eval_mode``, where epsilon-greedy agents
    act at random at ``itr=0``, the pre-training evaluation. With ``seed`` torch, numpy and
    ``random`` are seeded and ``env.seed(seed)`` applies at the first reset; later episodes
    continue the environment's random stream, so they differ. With ``frames`` (a list, or any
    object with ``append``), ``env.render()`` is appended after every reset and after every
    step: an episode of ``Length`` steps gives ``Length + 1`` frames.
    """
    from rlfast.samplers.collectors import local_input_arrays

    n_episodes = check_int(n_episodes, "n_episodes", minimum=1)
    max_steps = MAX_EPISODE_STEPS if max_steps is None else check_int(max_steps, "max_steps",
                                                                       minimum=1)
    if seed is not None:
        set_seed(seed)
        env.seed(seed)
    null_action = np.asarray(env.action_space.null_value())
    n_agents = int(getattr(env, "n_agents", 1))  # a multi-agent env: one column per agent
    agent.eval_mode(itr)
    results = []
    for _ in range(n_episodes):
        observation0 = env.reset()
        if frames is not None:
            frames.append(_render(env))
        if n_agents > 1:
            _play_agents(agent, env, observation0, null_action, TrajInfoCls, frames,
                         max_steps, results)
            continue
        inputs = local_input_arrays([observation0], null_action)
        observation, action, reward = inputs
        inputs_pyt = torchify_buffer(inputs)  # views: see the arrays' updates
        agent.reset()
        traj_info = TrajInfoCls()
        completed = False
        for _ in range(max_steps):
            with torch.no_grad():
                agent_action, _ = agent.step(*inputs_pyt)
            action[:] = numpify_buffer(agent_action)
            o, r, d, env_info = env.step(action[0])
            traj_info.step(observation[0], action[0], r, d, None, env_info)
            if frames is not None:
                frames.append(_render(env))
            if trajectory_done(env_info, d):
                completed = True
                break
            if d:  # e.g. a lost life: the game goes on, the agent's memory starts afresh
                agent.reset_one(idx=0)
                action[0] = null_action
                r = 0.0
            observation[0] = o
            reward[0] = r
        stats = {k: v for k, v in traj_info.terminate(o).items() if not k.startswith("_")}
        stats["Completed"] = completed
        results.append(stats)
    return results


def _play_agents(agent: Any, env: Env, observation0: Any, null_action: np.ndarray,
                 TrajInfoCls: Callable[..., TrajInfo], frames: Any, max_steps: int,
                 results: list) -> None:
    """One episode of :func:`run_episodes` in a multi-agent environment: every agent is a
    column of one batch, as in the samplers; an agent that leaves gets its state reset, the
    null action and a zero reward; the episode ends when every agent is done."""
    from rlfast.samplers.collectors import local_input_arrays

    inputs = local_input_arrays(list(observation0), null_action)
    observation, action, reward = inputs
    inputs_pyt = torchify_buffer(inputs)
    agent.reset()
    traj_info = TrajInfoCls()
    completed = False
    o = observation0
    for _ in range(max_steps):
        with torch.no_grad():
            agent_action, _ = agent.step(*inputs_pyt)
        action[:] = numpify_buffer(agent_action)
        o, r, d, env_info = env.step(action)
        traj_info.step(observation, action, r, d, None, env_info)
        if frames is not None:
            frames.append(_render(env))
        if np.all(d):
            completed = True
            break
        for k in np.flatnonzero(d):
            agent.reset_one(idx=int(k))
        action[d] = null_action
        observation[:] = o
        reward[:] = np.where(d, 0.0, r)
    stats = {k: v for k, v in traj_info.terminate(o).items() if not k.startswith("_")}
    stats["Completed"] = completed
    results.append(stats)


def env_fps(env: Env) -> float:
    """Frames per second at which ``env``'s frames play at real speed: a gymnasium
    environment's ``metadata["render_fps"]``, 60 / frame_skip for Atari, else 30."""
    from rlfast.envs.gym import GymEnvWrapper

    if isinstance(env, GymEnvWrapper):
        fps = getattr(env.env, "metadata", {}).get("render_fps")
        if fps:
            return float(fps)
    elif type(env).__name__ == "AtariEnv":
        return _ATARI_FPS / getattr(env, "_frame_skip", 1)
    return _DEFAULT_FPS


def return_summary(results: list[dict], key: str = "Return") -> str:
    """``"Return over N episodes: mean M  std S  min A  max B"`` (std over the episodes,
    ddof=0) for the statistic ``key`` of :func:`run_episodes`' results."""
    values = np.array([r[key] for r in results], dtype=np.float64)
    return (f"{key} over {len(values)} episode{'s' if len(values) != 1 else ''}: "
            f"mean {values.mean():.2f}  std {values.std():.2f}  min {values.min():.2f}  "
            f"max {values.max():.2f}")


def _add_common(parser: argparse.ArgumentParser, episodes: int) -> None:
    parser.add_argument("run_dir", help="a run directory written by rlfast train (it holds "
                                        "params.json and params.pkl or itr_<n>.pkl)")
    parser.add_argument("--episodes", type=int, default=episodes,
                        help=f"episodes to play (default {episodes})")
    parser.add_argument("--seed", type=int, default=0,
                        help="seed of torch, numpy and the environment (default 0); the "
                             "episodes differ from each other")
    parser.add_argument("--snapshot", default=None, metavar="PATH",
                        help="snapshot file to load (default: the run's newest)")
    parser.add_argument("--device", default="auto", metavar="auto|cpu|cuda|cuda:N",
                        help="where the agent runs: auto (default: GPU 0 when CUDA is "
                             "available, else the CPU), cpu, cuda (= cuda:0) or cuda:N")
    parser.add_argument("--max-steps", type=int, default=None, metavar="N",
                        help=f"cut an episode after N steps (default {MAX_EPISODE_STEPS})")


def add_eval_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``eval RUN_DIR [--episodes N] [--seed S] [--snapshot PATH] [--device D]
    [--max-steps N]`` to ``subparsers``; returns its parser."""
    parser = subparsers.add_parser(
        "eval", help="the return of a trained agent over N episodes",
        description="Play N episodes with the agent of a run directory in evaluation mode "
                    "and print the mean, std, min and max return.")
    _add_common(parser, episodes=10)
    return parser


def add_watch_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``watch RUN_DIR [--episodes N] [--seed S] [--video PATH] [--fps F] ...`` to
    ``subparsers``; returns its parser."""
    parser = subparsers.add_parser(
        "watch", help="watch a trained agent play, on screen or into a video",
        description="Play episodes with the agent of a run directory and show them in a "
                    "window, or write them to an mp4 or gif file with --video (one frame "
                    "after each reset and one after each step).")
    _add_common(parser, episodes=1)
    parser.add_argument("--video", default=None, metavar="PATH",
                        help="write the frames to PATH (.mp4 or .gif) instead of a window; "
                             f"needs {_VIDEO_EXTRA}")
    parser.add_argument("--fps", type=float, default=None,
                        help="frames per second (default: the environment's real speed)")
    return parser


def _error(message: Any) -> int:
    print(f"rlfast: error: {message}", file=sys.stderr)
    return 2


def _check_args(args: argparse.Namespace) -> None:
    if args.episodes < 1:
        raise PlaybackError(f"--episodes must be >= 1; got {args.episodes}")
    if args.max_steps is not None and args.max_steps < 1:
        raise PlaybackError(f"--max-steps must be >= 1; got {args.max_steps}")
    if args.seed < 0:
        raise PlaybackError(f"--seed must be >= 0; got {args.seed}")
    if getattr(args, "fps", None) is not None and not args.fps > 0:
        raise PlaybackError(f"--fps must be > 0; got {args.fps}")
    resolve_device(args.device)  # ValueError for a device this machine lacks, before a window


_LOAD_ERRORS = (RunDirError, SnapshotCorruptError, FileNotFoundError, ValueError)


def _snapshot_line(params: dict) -> str:
    snap = params["snapshot"]
    return (f"{params['algo']} on {params['env']}: snapshot {snap['path']} (iteration "
            f"{snap['itr']}, {snap['cum_steps']} steps), agent on "
            f"{params.get('agent_device', 'cpu')}")


def eval_main(args: argparse.Namespace) -> int:
    """``rlfast eval``: print the return statistics of ``args.episodes`` episodes; 0, or 2
    with ``rlfast: error: ...`` for a run directory or snapshot that cannot be played."""
    try:
        _check_args(args)
        params, agent, make_env = load_trained_agent(args.run_dir, args.snapshot, args.device)
    except _LOAD_ERRORS as e:
        return _error(e)
    print(_snapshot_line(params))
    env = make_env()
    try:
        results = run_episodes(agent, env, args.episodes, seed=args.seed,
                               max_steps=args.max_steps, TrajInfoCls=make_env.TrajInfoCls,
                               itr=params["snapshot"]["itr"] + 1)
    finally:
        env.close()
    print(return_summary(results))
    if "GameScore" in results[0]:
        print(return_summary(results, "GameScore"))
    lengths = [r["Length"] for r in results]
    print(f"Length: mean {np.mean(lengths):.1f}  min {min(lengths)}  max {max(lengths)} steps")
    _report_cut(results, args.max_steps)
    return 0


def _report_cut(results: list[dict], max_steps: int | None) -> None:
    cut = sum(not r["Completed"] for r in results)
    if cut:
        print(f"{cut} episode(s) did not end within {max_steps or MAX_EPISODE_STEPS} steps "
              f"and were cut there (--max-steps)")


def watch_main(args: argparse.Namespace) -> int:
    """``rlfast watch``: play ``args.episodes`` episodes in a window, or into ``args.video``;
    print each episode's return and the video's path. 0, or 2 with ``rlfast: error: ...``."""
    try:
        _check_args(args)
        if args.video is None:
            check_display()
        else:
            _import_video_writer(_video_format(args.video))
            # Frames are drawn off screen: SDL (gymnasium's classic-control renderer) needs
            # no display then, and says nothing about a missing one.
            os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
        params, agent, make_env = load_trained_agent(args.run_dir, args.snapshot, args.device)
    except _LOAD_ERRORS as e:
        return _error(e)
    print(_snapshot_line(params))
    env = make_env(render=True)
    sink = None
    try:
        fps = args.fps or env_fps(env)
        if args.video is not None:
            sink = VideoWriter(args.video, fps)
        else:
            sink = _Window(f"rlfast watch: {params['env']}", fps)
        results = run_episodes(agent, env, args.episodes, seed=args.seed, frames=sink,
                               max_steps=args.max_steps, TrajInfoCls=make_env.TrajInfoCls,
                               itr=params["snapshot"]["itr"] + 1)
    except _WindowClosed:
        print("Window closed.")
        return 0
    except PlaybackError as e:
        if isinstance(sink, VideoWriter):  # a partial video would pass for a whole one
            sink.close()
            if os.path.exists(sink.path):
                os.remove(sink.path)
        return _error(e)
    finally:
        if sink is not None:
            sink.close()
        env.close()
    for i, r in enumerate(results, 1):
        score = f", game score {r['GameScore']:.2f}" if "GameScore" in r else ""
        print(f"Episode {i}: return {r['Return']:.2f}{score}, length {r['Length']} steps")
    _report_cut(results, args.max_steps)
    if args.video is not None:
        print(f"Video: {os.path.abspath(args.video)} ({sink.count} frames at {fps:g} fps)")
    return 0
