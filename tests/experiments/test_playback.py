"""``rlfast eval`` and ``rlfast watch`` on tiny real runs made with ``rlfast train``: the
statistics eval prints match an independent ``run_episodes``, videos hold exactly one frame
per reset and one per step, and unusable run directories, snapshots, displays and
environments are short ``rlfast: error:`` messages with exit status 2."""
from __future__ import annotations

import argparse
import importlib.util
import re
import sys

import numpy as np
import pytest

from rlfast.cli import main as cli_main
from rlfast.experiments.playback import (PlaybackError, add_eval_parser, add_watch_parser,
                                         eval_main, load_trained_agent, run_episodes,
                                         watch_main)

HAS_PYGAME = importlib.util.find_spec("pygame") is not None  # CartPole's renderer
# One evaluation episode per log row, given the steps to finish (CartPole stops at 500): a
# training evaluation that completes no episode scores NaN.
QUIET_EVAL = ["--set", "sampler.eval_n_envs=1", "--set", "sampler.eval_max_steps=510",
              "--set", "sampler.eval_max_trajectories=1"]
PONG_HORIZON = 20  # env.horizon of the tiny Pong run: every game is cut after 20 steps


def _train(run_dir, *argv) -> str:
    assert cli_main(["train", *argv, "--sampler", "serial", "--log-dir", str(run_dir),
                     "--no-progress", *QUIET_EVAL]) == 0
    return str(run_dir)


@pytest.fixture(scope="module")
def cartpole_run(tmp_path_factory):
    return _train(tmp_path_factory.mktemp("cartpole") / "run", "ppo", "CartPole-v1",
                  "--steps", "2000", "--n-envs", "4",
                  "--set", "runner.log_interval_steps=1000",
                  "--set", "sampler.max_decorrelation_steps=10")


@pytest.fixture(scope="module")
def pong_run(tmp_path_factory):
    return _train(tmp_path_factory.mktemp("pong") / "run", "ppo", "atari:pong",
                  "--steps", "64", "--n-envs", "2", "--set", "sampler.batch_T=32",
                  "--set", "runner.log_interval_steps=64",
                  "--set", "sampler.max_decorrelation_steps=0",
                  "--set", f"env.horizon={PONG_HORIZON}")


def _parse(*argv) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="rlfast")
    sub = parser.add_subparsers(dest="command", required=True)
    add_eval_parser(sub)
    add_watch_parser(sub)
    return parser.parse_args(list(argv))


def _eval(*argv) -> int:
    return eval_main(_parse("eval", *argv))


def _watch(*argv) -> int:
    return watch_main(_parse("watch", *argv))


def _stats(out: str, key: str = "Return") -> dict:
    m = re.search(rf"^{key} over (\d+) episodes?: mean (\S+)  std (\S+)  min (\S+)  max (\S+)$",
                  out, re.MULTILINE)
    assert m, out
    return dict(n=int(m[1]), mean=float(m[2]), std=float(m[3]), min=float(m[4]),
                max=float(m[5]))


def _episode_lengths(out: str) -> list[int]:
    return [int(n) for n in re.findall(r"^Episode \d+: .*length (\d+) steps$", out, re.MULTILINE)]


def _frame_count(path: str) -> tuple[int, tuple]:
    import imageio.v3 as iio
    frames = iio.imread(path)
    return frames.shape[0], frames.shape[1:]


# ---- eval ---------------------------------------------------------------------------------------
def test_eval_statistics_match_an_independent_run(cartpole_run, capsys):
    assert _eval(cartpole_run, "--episodes", "4", "--seed", "3") == 0
    out = capsys.readouterr().out
    printed = _stats(out)
    assert printed["n"] == 4
    assert printed["min"] <= printed["mean"] <= printed["max"]
    params, agent, make_env = load_trained_agent(cartpole_run)
    results = run_episodes(agent, make_env(), 4, seed=3, itr=params["snapshot"]["itr"] + 1)
    returns = np.array([r["Return"] for r in results])
    expected = dict(mean=returns.mean(), std=returns.std(), min=returns.min(), max=returns.max())
    for key, value in expected.items():
        assert printed[key] == pytest.approx(value, abs=0.006), key
    assert f"Length: mean {np.mean([r['Length'] for r in results]):.1f}" in out
    assert all(r["Completed"] and r["Return"] == r["Length"] for r in results)  # +1 per step


def test_seeded_episodes_repeat_and_differ_from_each_other(cartpole_run):
    _, agent, make_env = load_trained_agent(cartpole_run)

    class FirstObservations:  # records each episode's first observation
        def __init__(self, env):
            self.env, self.first = env, []

        def reset(self):
            self.first.append(self.env.reset())
            return self.first[-1]

        def __getattr__(self, name):
            return getattr(self.env, name)

    runs = []
    for _ in range(2):
        env = FirstObservations(make_env())
        runs.append((run_episodes(agent, env, 3, seed=5), env.first))
    (results_a, first_a), (results_b, first_b) = runs
    assert results_a == results_b
    np.testing.assert_array_equal(first_a, first_b)
    assert len({obs.tobytes() for obs in first_a}) == 3  # no reseed between episodes


def test_eval_atari_reports_game_score(pong_run, capsys):
    assert _eval(pong_run, "--episodes", "1") == 0
    out = capsys.readouterr().out
    assert _stats(out, "GameScore")["n"] == 1
    assert f"Length: mean {PONG_HORIZON}.0" in out


def test_max_steps_cuts_an_episode(cartpole_run):
    _, agent, make_env = load_trained_agent(cartpole_run)
    [result] = run_episodes(agent, make_env(), 1, seed=0, max_steps=7)
    assert result["Length"] == 7 and not result["Completed"]


# ---- watch -------------------------------------------------------------------------------------
def test_watch_pong_mp4_has_one_frame_per_reset_and_step(pong_run, tmp_path, capsys):
    video = tmp_path / "pong.mp4"
    assert _watch(pong_run, "--episodes", "2", "--video", str(video)) == 0
    out = capsys.readouterr().out
    lengths = _episode_lengths(out)
    assert lengths == [PONG_HORIZON, PONG_HORIZON]
    assert str(video) in out
    count, shape = _frame_count(str(video))
    assert count == sum(n + 1 for n in lengths)
    assert shape == (210, 160, 3)


def test_watch_gif_keeps_the_total_duration(pong_run, tmp_path, capsys):
    from PIL import Image
    video = tmp_path / "pong.gif"
    assert _watch(pong_run, "--video", str(video), "--fps", "10") == 0
    [length] = _episode_lengths(capsys.readouterr().out)
    with Image.open(video) as gif:
        durations = []
        for k in range(gif.n_frames):
            gif.seek(k)
            durations.append(gif.info["duration"])
        assert gif.size == (160, 210)
    # Pillow merges identical consecutive frames, adding their durations (100 ms at 10 fps).
    assert 1 <= len(durations) <= length + 1
    assert sum(durations) == 100 * (length + 1)


@pytest.mark.skipif(not HAS_PYGAME, reason="CartPole draws its frames with pygame")
@pytest.mark.parametrize("suffix", ["mp4", "gif"])
def test_watch_cartpole_video(cartpole_run, tmp_path, capsys, suffix):
    video = tmp_path / f"cartpole.{suffix}"
    assert _watch(cartpole_run, "--video", str(video), "--max-steps", "30") == 0
    [length] = _episode_lengths(capsys.readouterr().out)
    count, shape = _frame_count(str(video))
    assert shape == (400, 600, 3)
    if suffix == "mp4":
        assert count == length + 1
    else:
        assert 1 <= count <= length + 1


# ---- errors ------------------------------------------------------------------------------------
def _error_of(capsys, status: int) -> str:
    assert status == 2
    err = capsys.readouterr().err
    assert err.startswith("rlfast: error: "), err
    return err


def test_directory_without_params_json(tmp_path, capsys):
    assert "params.json" in _error_of(capsys, _eval(str(tmp_path)))
    assert "is not a directory" in _error_of(capsys, _watch(str(tmp_path / "absent"),
                                                            "--video", "x.mp4"))


def test_run_without_snapshot(tmp_path, capsys):
    run = _train(tmp_path / "run", "ppo", "CartPole-v1", "--steps", "256", "--n-envs", "4",
                 "--snapshot-mode", "none", "--set", "sampler.max_decorrelation_steps=0")
    capsys.readouterr()
    assert "no snapshot" in _error_of(capsys, _eval(run))
    assert "no snapshot file" in _error_of(capsys, _eval(run, "--snapshot",
                                                         str(tmp_path / "itr_3.pkl")))


def test_watch_without_display_asks_for_video(cartpole_run, monkeypatch, capsys):
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    assert "--video" in _error_of(capsys, _watch(cartpole_run))


def test_bad_video_name_and_missing_writer(cartpole_run, tmp_path, monkeypatch, capsys):
    assert ".mp4 or .gif" in _error_of(capsys, _watch(cartpole_run, "--video",
                                                      str(tmp_path / "x.avi")))
    monkeypatch.setitem(sys.modules, "imageio", None)
    monkeypatch.setitem(sys.modules, "imageio.v2", None)
    assert "pip install rlfast[video]" in _error_of(
        capsys, _watch(cartpole_run, "--video", str(tmp_path / "x.mp4")))


def test_environment_that_cannot_render(cartpole_run, tmp_path, capsys):
    _, agent, make_env = load_trained_agent(cartpole_run)
    with pytest.raises(PlaybackError, match="render_mode"):
        run_episodes(agent, make_env(render=False), 1, frames=[])
    if not HAS_PYGAME:  # the real case: CartPole's renderer is not installed
        video = tmp_path / "cartpole.mp4"
        assert "pygame" in _error_of(capsys, _watch(cartpole_run, "--video", str(video)))
        assert not video.exists()  # no partial video left behind


def test_bad_arguments(cartpole_run, capsys):
    assert "--episodes" in _error_of(capsys, _eval(cartpole_run, "--episodes", "0"))
    assert "device" in _error_of(capsys, _eval(cartpole_run, "--device", "tpu"))


# ---- through the rlfast command (fails until cli.py wires eval and watch) -----------------------
def test_cli_eval(cartpole_run, capsys):
    assert cli_main(["eval", cartpole_run, "--episodes", "2"]) == 0
    assert _stats(capsys.readouterr().out)["n"] == 2


def test_cli_watch(pong_run, tmp_path, capsys):
    video = tmp_path / "pong.mp4"
    assert cli_main(["watch", pong_run, "--video", str(video)]) == 0
    [length] = _episode_lengths(capsys.readouterr().out)
    assert _frame_count(str(video))[0] == length + 1
