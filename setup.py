from setuptools import find_packages, setup

setup(
    name="rlfast",
    version="0.1.0",
    description="High-throughput deep reinforcement learning in PyTorch (rlpyt-style).",
    long_description=open("README.md").read() if __import__("os").path.exists("README.md") else "",
    long_description_content_type="text/markdown",
    packages=find_packages(include=["rlfast", "rlfast.*"]),
    python_requires=">=3.10",
    install_requires=[
        "torch>=2.4,<3",
        "numpy>=1.23",
        "gymnasium>=0.29",
        "ale-py>=0.9",
        "opencv-python>=4.7",
        "psutil>=5.9",
        "pyprind>=2.11",
    ],
    extras_require={
        # The test extra installs every optional extra the tests exercise, and pytest-xdist,
        # which runs the in-process test modules beside the process tests (-n 2; see
        # tests/_parallel.py).
        "test": ["pytest>=7", "pytest-xdist>=3.0", "tensorboard>=2.10", "matplotlib>=3.5",
                 "imageio>=2.20", "imageio-ffmpeg>=0.4.5", "pygame>=2.1", "submitit>=1.4",
                 "gymnasium[box2d,mujoco]>=0.29", "optuna>=4", "cma>=3.2",
                 "pettingzoo>=1.24", "mpe2>=1.0", "multi-agent-ale-py>=0.1.12", "popgym>=1.0",
                 "minatar>=1.0.15", "onnx>=1.16", "onnxscript>=0.3",
                 "onnxruntime>=1.18", "wandb>=0.19", "ruff>=0.17,<0.18"],
        # The linter .ci/run runs (pyproject.toml configures it). Pinned to a minor version:
        # ruff's rules change between minor versions, and CI must not start failing on its own.
        "lint": ["ruff>=0.17,<0.18"],
        "tensorboard": ["tensorboard>=2.10"],
        "plot": ["matplotlib>=3.5"],  # rlfast plot
        # rlfast watch --video: imageio writes mp4 through imageio-ffmpeg, which ships its own
        # ffmpeg binary; pygame draws gymnasium's classic-control frames.
        "video": ["imageio>=2.20", "imageio-ffmpeg>=0.4.5", "pygame>=2.1"],
        "slurm": ["submitit>=1.4"],  # run_experiments(backend="slurm")
        # rlfast tune (hyperparameter search): Optuna's samplers, median pruner and SQLite
        # studies, which a few hundred lines of our own could not match.
        "tune": ["optuna>=4"],
        # rlfast.es.CMAES: Hansen's reference CMA-ES (step-size and covariance adaptation,
        # restarts, stop conditions), far better kept than a CMA-ES written here.
        "es": ["cma>=3.2"],
        # Multi-agent environments (pz:<module>): PettingZoo's parallel API and converters,
        # and its MPE tasks (simple_spread ...), which now live in the mpe2 package.
        "pettingzoo": ["pettingzoo>=1.24", "mpe2>=1.0"],
        # PettingZoo's multi-agent Atari games (pz:pettingzoo.atari.pong_v3): the multi-player
        # ALE build they run on, and pygame, which their module imports; the ROMs are ale-py's.
        "pettingzoo-atari": ["pettingzoo>=1.24", "multi-agent-ale-py>=0.1.12", "pygame>=2.1"],
        # POPGym's partially observable tasks (popgym:<Task>), the memory benchmark of
        # Morad et al. (ICLR 2023); its core install needs only numpy and gymnasium.
        "popgym": ["popgym>=1.0"],
        # MinAtar's 10 x 10 miniature Atari games (minatar:<game>), a DQN testbed a CPU can run.
        "minatar": ["minatar>=1.0.15"],
        # rlfast export --format onnx: torch.onnx's exporter writes through onnx and
        # onnxscript; onnxruntime runs the written file to check it (and serves it).
        "export": ["onnx>=1.16", "onnxscript>=0.3", "onnxruntime>=1.18"],
        # --wandb: Weights & Biases tracking (offline mode needs no account or network).
        "wandb": ["wandb>=0.19"],
        # Box2D (LunarLander, BipedalWalker) and MuJoCo (HalfCheetah, Hopper, ...) tasks,
        # through gymnasium's own extras.
        "box2d": ["gymnasium[box2d]>=0.29"],
        "mujoco": ["gymnasium[mujoco]>=0.29"],
        # The peers scripts/bench/bench_*.py compare against (BenchMARL's MAPPO for
        # scripts/bench/bench_multiagent.py), and MuJoCo for the HalfCheetah-v5 SAC figures of
        # scripts/bench/bench_gpu.sh --replay-only; never imported by rlfast itself.
        # The documentation site (mkdocs.yml; `mkdocs build --strict`, which .ci/run runs):
        # MkDocs with the Material theme, and mkdocstrings, which writes the API reference from
        # rlfast's own docstrings so that the reference cannot drift from the code.
        "docs": ["mkdocs>=1.6,<2", "mkdocs-material>=9.5", "mkdocstrings[python]>=0.26"],
        "bench": ["stable-baselines3>=2.0", "envpool>=0.8", "mujoco>=3.0", "benchmarl>=1.5",
                  "pettingzoo>=1.24", "mpe2>=1.0"],
    },
    entry_points={"console_scripts": ["rlfast=rlfast.cli:main"]},
)
