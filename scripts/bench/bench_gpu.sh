#!/usr/bin/env bash
# Every GPU figure of issue 37 (or, with --replay-only, of issue 38: below) in one run of at
# most 8 minutes on the GPU machine (one H100 or H200, 16 cores): side by side, with the
# machine (GPU, cores, torch) and the ratios,
#   - sampling alone, 32 Pong envs, random and Nature-CNN agent, per sampler (cpu, gpu,
#     alternating), the CNN / random ratio (target for the gpu sampler >= 0.85);
#   - PPO training env steps/s at 8, 32 (and 64) envs for each sampler, runner.overlap and
#     algo.compile on and off, against the random-agent ceiling (rlfast-random; target: PPO
#     at 32 envs >= 0.7 of it, PPO at 8 envs >= 6,800 steps/s), a CleanRL loop and a
#     LeanRL-style loop on ale-py's AtariVectorEnv (scripts/bench/_cleanrl.py);
#   - GPU utilisation from nvidia-smi through every window;
#   - a Pong learning run, stopped when its mean training return reaches +18 or at 5 minutes.
# The budget (scripts/bench/_gpu_plan.py), 480 s by default (--budget): measurements run in
# priority order, each a 2 s warm-up and a 6 s window after its start-up (--warmup, --seconds);
# what the acceptance figures need comes first (random-agent ceiling, PPO at 32 and 8 envs,
# algo.compile, the gpu sampler table, overlap, the LeanRL/CleanRL peers), while 320 s stay
# reserved for the learning run (up to 300 s, --learn-seconds); the rest of the matrix follows
# it with the time left. What does not fit is listed as skipped; --no-learn gives the whole
# budget to the matrix. The time left is printed as it goes.
#
# The replay section of issue 38 (--replay-only, or --section replay; --section all runs both,
# more than one 10-minute call), 420 s by default, in priority order
# (scripts/bench/_gpu_replay.py):
#   - DQN on atari:pong, batch 32, replay ratio 8: updates/s and env steps/s, sync (cpu and gpu
#     sampler) and async, through scripts/bench/bench_async.py (a 2 s warm-up and a 6 s window
#     after 3000 learning-start steps), against a CleanRL-style DQN loop (target >= 1,000 updates/s
#     sync; async >= 1.3x the best sync env steps/s);
#   - SAC on HalfCheetah-v5 at LeanRL's settings through `rlfast train sac`, env steps/s over
#     10 s from 3 s past learning start (5000 steps) and compilation, against a CleanRL-style
#     and a LeanRL-style (torch.compile + CUDA graphs) loop (target >= 725 env steps/s);
#   - rlfast with algo.replay_device=device, then prefetch, algo.compile=True, host last (the
#     overrides its presets lack are left out and said so).
#
# Usage:
#   scripts/bench/bench_gpu.sh --fetch-wheels
#                                         here (with internet): the cp312 wheels into .whl/
#   scripts/bench/bench_gpu.sh [OPTIONS]   on the GPU machine (options: _gpu.py --help,
#                                         e.g. --budget 480, --no-learn, --only rlfast-cpu,
#                                         --replay-only)
#   scripts/bench/bench_gpu.sh --dry-run   the whole run on this CPU machine at tiny sizes
#                                         (with --replay-only: the replay section)
# Output: the tables on stdout and, in $OUT when set (else data/bench_gpu/<time>/):
# bench_gpu.md, bench_gpu.json, bench_gpu.log, gpu_util.csv, learn_progress.csv,
# learn_console.log.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY="${PYTHON:-python3}"

# The GPU machine lacks these; they travel as wheels (one version each: two stop the install).
# Its image already has numpy, cloudpickle, opencv-python-headless and psutil; typing-extensions
# travels too, for gymnasium's floor of 4.12. mujoco (HalfCheetah-v5) imports none of its
# declared needs at `import mujoco`; gymnasium's MuJoCo envs import glfw (its wheel carries the
# library; nothing is drawn) and imageio and packaging, which the image has.
WHEELS=(gymnasium==1.4.0 ale-py==0.12.1 pyprind==2.11.3 farama-notifications==0.0.6
        typing-extensions==4.16.0 mujoco==3.17.0 glfw==2.11.0)
SITE=/tmp/rlfast_bench_site

# Switch for the learning run: the flags that put `rlfast train`'s learner on the GPU. Empty:
# probed (`--device cuda` once `rlfast train --help` lists --device, else an affinity code
# with one GPU). Set it to force, e.g. LEARN_DEVICE_FLAGS="--device cuda".
LEARN_DEVICE_FLAGS="${LEARN_DEVICE_FLAGS:-}"

if [[ "${1:-}" == "--fetch-wheels" ]]; then
    mkdir -p .whl
    "$PY" -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
        --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
        --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl "${WHEELS[@]}"
    ls -l .whl && du -sh .whl
    exit 0
fi

if ! "$PY" -c "import gymnasium, ale_py, pyprind, mujoco, glfw" 2>/dev/null; then
    if ! compgen -G ".whl/*.whl" >/dev/null; then
        echo "gymnasium / ale-py / pyprind / mujoco / glfw missing and no wheels in .whl/:" \
             "run scripts/bench/bench_gpu.sh --fetch-wheels where pip reaches PyPI" >&2
        exit 2
    fi
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target "$SITE" .whl/*.whl
    export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1

OUT_DIR="${OUT:-data/bench_gpu/$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$OUT_DIR"
ARGS=(--out "$OUT_DIR")
if [[ -n "$LEARN_DEVICE_FLAGS" ]]; then
    ARGS+=(--learn-device-flags "$LEARN_DEVICE_FLAGS")
fi
echo "bench_gpu: $("$PY" --version), output in $OUT_DIR"
set +e
"$PY" scripts/bench/_gpu.py "${ARGS[@]}" "$@" 2>&1 | tee "$OUT_DIR/bench_gpu.log"
status=${PIPESTATUS[0]}
set -e
exit "$status"
