"""rlfast: high-throughput deep RL for PyTorch.

The registration functions are importable from here (``rlfast.register_env_family``,
``register_algorithm``, ``register_sampler``, ``register_es_strategy``); they are loaded on
first use, so that ``import rlfast.utils`` and friends stay light.

Importing rlfast before torch makes torch's OpenMP threads wait passively
(``OMP_WAIT_POLICY=PASSIVE``, unless the variable is already set): a thread that waits for
work sleeps instead of spinning. With spinning threads (OpenMP's default), a learner of two
torch threads beside any other busy process on a 2-core machine ran 14x slower (SAC on
Pendulum-v1 with ``--affinity 0slt_2cpu_0gpu_2cpr_0hto``, a PPO and a HalfCheetah run
beside it: 66 steps/s against 943 with passive waiting, the same returns), because each
thread burned its time slices spinning while the other waited for a core. OpenMP reads the
variable once, when torch loads it: set it (``ACTIVE`` to spin) before the first
``import torch`` of the process; rlfast's own processes (the CLI, sampler workers, ranks)
import rlfast first. ``scripts/bench/bench_threads.py`` measures both policies, idle and loaded.
"""
import os as _os

_os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

__version__ = "0.1.0"

_REGISTRATION = ("register_algorithm", "register_sampler", "register_env_family",
                 "register_es_strategy")


def __getattr__(name: str):
    if name in _REGISTRATION:
        from rlfast.experiments import catalog
        return getattr(catalog, name)
    raise AttributeError(f"module 'rlfast' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(list(globals()) + list(_REGISTRATION))
