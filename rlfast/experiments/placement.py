"""Where a run computes: the sampler ``rlfast train`` picks when the command line names none,
and the affinity (cores, torch threads, GPU) of every process of a run.

* The sampler (:func:`default_sampler`): a per-environment choice first
  (``ENV_SAMPLER`` of :mod:`rlfast.experiments.env_overrides`), then the algorithm's own
  (its registry entry's ``default_sampler``), then the measured rule
  (:func:`sampler_for_device`): on a CUDA learner the convolutional (Atari) agents are
  served by whichever of the GPU action server (``gpu`` sampler) or worker-side CPU
  inference (``cpu`` sampler) measured faster for that model at that number of environments
  per core (:data:`SAMPLER_MEASUREMENTS`, interpolated); else the ``cpu`` sampler.
* The affinity (:func:`run_affinity`): an affinity code's, checked against ``--device``
  (:func:`rlfast.experiments.device.learner_device`), with the master's torch threads fitted
  to its slot (:func:`threads_in_slot`); without a code, every available core
  (:func:`default_affinity`, :func:`default_async_affinity`) and the learner on the device
  ``--device`` names.

What to build from a configuration is :mod:`rlfast.experiments.presets`; which device the
learner uses is :mod:`rlfast.experiments.device`. Nothing here initializes CUDA.
"""
from __future__ import annotations

import bisect
import dataclasses
import math
from collections.abc import Mapping, Sequence

from rlfast.experiments import catalog
from rlfast.experiments.device import device_label, learner_device, resolve_device
from rlfast.experiments.env_overrides import ENV_SAMPLER
from rlfast.utils.misc import available_cpus

__all__ = ["SamplerMeasurement", "SAMPLER_MEASUREMENTS", "sampler_for_device",
           "default_sampler", "default_affinity", "default_async_affinity", "run_affinity",
           "threads_in_slot"]


# ---- the sampler ---------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class SamplerMeasurement:
    """Training speed of each sampler at one setting, with the learner on a GPU: ``model``
    (the agent family the rule serves, ``"conv"``), ``n_envs`` environments on ``n_cpus``
    cores, and ``steps_per_s``: sampler name -> the environment steps per second of training
    measured (one figure per repeat; their mean is used)."""

    model: str
    n_envs: int
    n_cpus: int
    steps_per_s: Mapping[str, tuple[float, ...]]

    @property
    def envs_per_cpu(self) -> float:
        return self.n_envs / self.n_cpus

    def speed(self, sampler: str) -> float:
        figures = self.steps_per_s[sampler]
        return sum(figures) / len(figures)


# Source: issue 37. One NVIDIA H200, 16 Xeon cores, torch 2.11+cu130; PPO on atari:pong with
# the Nature CNN, scripts/bench/bench_atari_train.py --device cuda, 128 steps per env, 4 epochs
# x 4 minibatches, 12 s after a 6 s warm-up; training steps/s. The cpu sampler at 32 envs gave
# 6,865-7,477 over repeats. scripts/bench/bench_gpu.sh re-measures these; update the rows
# here.
SAMPLER_MEASUREMENTS: tuple[SamplerMeasurement, ...] = (
    SamplerMeasurement("conv", n_envs=8, n_cpus=16,
                       steps_per_s={"gpu": (2660.0,), "cpu": (2320.0,)}),
    SamplerMeasurement("conv", n_envs=32, n_cpus=16,
                       steps_per_s={"gpu": (6838.0,), "cpu": (6865.0, 7477.0),
                                    "alternating": (5917.0,)}),
)
# Ties (equal estimated speed) go to the first of these: the cpu sampler has no action
# server protocol to pay for.
_SAMPLER_PREFERENCE = ("cpu", "gpu", "alternating")


def _estimated_speeds(rows: Sequence[SamplerMeasurement], envs_per_cpu: float
                      ) -> dict[str, float]:
    """Each sampler's steps/s at ``envs_per_cpu``: interpolated in log-log between the two
    measured rows around it (samplers measured in both), the nearest row's outside them."""
    rows = sorted(rows, key=lambda r: r.envs_per_cpu)
    xs = [math.log(r.envs_per_cpu) for r in rows]
    x = math.log(envs_per_cpu)
    if x <= xs[0] or x >= xs[-1]:
        nearest = rows[0] if x <= xs[0] else rows[-1]
        return {s: nearest.speed(s) for s in nearest.steps_per_s}
    i = bisect.bisect_right(xs, x)  # xs[i - 1] <= x < xs[i]
    low, high = rows[i - 1], rows[i]
    w = (x - xs[i - 1]) / (xs[i] - xs[i - 1])
    return {s: math.exp((1 - w) * math.log(low.speed(s)) + w * math.log(high.speed(s)))
            for s in low.steps_per_s if s in high.steps_per_s}


def sampler_for_device(conv: bool, n_envs: int, n_cpus: int, cuda_idx: int | None,
                       table: Sequence[SamplerMeasurement] = SAMPLER_MEASUREMENTS
                       ) -> str | None:
    """The sampler that measured fastest for this run, or None where no measurement applies.

    Applies to a learner on a GPU (``cuda_idx`` not None) with a convolutional agent
    (``conv``: the Atari agents): the sampler with the highest training speed at this many
    environments per core (``n_envs / n_cpus``) in ``table``'s rows for ``"conv"``. Between
    two measured rows speeds are interpolated linearly in log(steps/s) against log(envs per
    core); beyond the measured range the nearest row decides; ties go to the cpu sampler.
    With the issue-37 rows the GPU action server wins up to about 1.4 environments per core
    (22 envs on 16 cores) and worker-side CPU inference above. None (the caller keeps its
    CPU-side default) for a CPU learner, an MLP agent, or a model the table lacks.
    """
    if cuda_idx is None or not conv:
        return None
    rows = [row for row in table if row.model == "conv"]
    if not rows:
        return None
    speeds = _estimated_speeds(rows, max(n_envs, 1) / max(n_cpus, 1))
    if not speeds:
        return None
    rank = {s: i for i, s in enumerate(_SAMPLER_PREFERENCE)}
    return max(speeds, key=lambda s: (speeds[s], -rank.get(s, len(rank))))


def default_sampler(algo: str, env_id: str | None = None, cuda_idx: int | None = None,
                    n_envs: int | None = None, n_cpus: int | None = None,
                    runner: str = "sync") -> str:
    """The sampler ``rlfast train`` uses without ``--sampler``.

    In this order: the per-environment choice of ``ENV_SAMPLER`` (``env_overrides``) where it
    has one for (``algo``, ``env_id``); serial for the replay-based continuous-control
    algorithms (their registry entry's ``default_sampler``: one environment and many updates
    per step leave nothing for parallel workers to hide); with the learner on a GPU
    (``cuda_idx``) and a convolutional agent (an env family of images, ``atari:<game>``) in a
    synchronous run, the measured rule of :func:`sampler_for_device` (the GPU action server or
    worker-side inference, whichever measured faster at ``n_envs`` environments, default the
    preset's ``batch_B``, on ``n_cpus`` cores, default the available ones); else ``"cpu"``.
    """
    if env_id is not None and (algo, env_id) in ENV_SAMPLER:
        return ENV_SAMPLER[(algo, env_id)]
    spec = catalog.algorithm(algo)
    if spec.default_sampler is not None:
        return spec.default_sampler
    family = catalog.env_family(env_id)[0] if env_id is not None else None
    if family is not None and family.pixels and cuda_idx is not None and runner == "sync":
        if n_envs is None:
            own = family.preset_family
            preset = spec.presets.get((None if callable(own) else own) or "")
            n_envs = preset["sampler"]["batch_B"] if preset else 1
        n_cpus = len(available_cpus()) if n_cpus is None else n_cpus
        measured = sampler_for_device(True, n_envs, n_cpus, cuda_idx)
        if measured is not None:
            return measured
    return "cpu"


# ---- the affinity ------------------------------------------------------------------------

def default_affinity(n_envs: int, sampler: str, master_threads: int | None = None,
                     device: str | None = "auto") -> dict:
    """The affinity dict of a single-machine run that uses every available core.

    One worker per core (at most one per environment; the alternating sampler needs two),
    and the learner on the GPU that ``device`` names (``--device``: ``auto``, the default,
    is GPU 0 when CUDA is available; ``cpu``; ``cuda``; ``cuda:N``), for every sampler; the
    gpu and alternating samplers serve their actions on that device too.
    ``master_threads`` sets the master's torch threads while the algorithm optimizes
    (default None: every core, since the synchronous samplers' workers are idle then; the
    master samples on one thread, see ``MinibatchRlBase``).
    """
    cpus = available_cpus()
    cuda_idx = resolve_device(device)
    spec = catalog.sampler(sampler)
    if not spec.worker_processes:
        return dict(master_cpus=cpus, master_torch_threads=master_threads, cuda_idx=cuda_idx)
    n_workers = max(spec.min_workers, min(len(cpus), n_envs))
    workers = [[cpus[i % len(cpus)]] for i in range(n_workers)]
    return dict(master_cpus=cpus, master_torch_threads=master_threads, workers_cpus=workers,
                worker_torch_threads=1, cuda_idx=cuda_idx)


def default_async_affinity(sampler: str, device: str | None = "auto") -> dict:
    """The async affinity of a single-machine run: the optimizer on the GPU that ``device``
    names (``auto``, the default: GPU 0 when CUDA is available, else the CPU), the sampler
    process and its workers on every core (one worker per core, two at least for the
    alternating sampler). The sampler process acts on the CPU (``cuda_idx=None``), also for
    the gpu and alternating samplers."""
    cpus = available_cpus()
    cuda_idx = resolve_device(device)
    n_workers = max(catalog.sampler(sampler).min_workers, len(cpus))
    sampler_affinity = dict(master_cpus=cpus, master_torch_threads=1,
                            workers_cpus=[[cpus[i % len(cpus)]] for i in range(n_workers)],
                            worker_torch_threads=1, cuda_idx=None, set_affinity=True)
    return dict(optimizer=[dict(cuda_idx=cuda_idx, master_cpus=cpus,
                                master_torch_threads=1)], sampler=sampler_affinity)


def run_affinity(config: dict, sampler: str, runner: str = "sync",
                 affinity: dict | list | None = None, device: str | None = "auto",
                 multi_rank: bool = False, code: str | None = None) -> dict | list:
    """The affinity a run of ``config`` uses: ``affinity`` when given (decoded from the
    affinity ``code``), checked against ``device`` (an explicit ``--device`` that
    contradicts it is a ``ValueError``, see :func:`~rlfast.experiments.device.learner_device`);
    else the default for the runner on ``device``: :func:`default_async_affinity`, or
    :func:`default_affinity` with ``batch_B`` workers at most and the master's optimizing
    threads from the config's ``affinity.master_torch_threads`` (0: every core).
    ``multi_rank``: several ranks share the default affinity, each on its own GPU."""
    cuda_idx = learner_device(device, affinity, code=code, multi_rank=multi_rank)
    if affinity is not None:
        return threads_in_slot(affinity, config)
    if runner == "async":
        return default_async_affinity(sampler, device_label(cuda_idx))
    # A preset's "affinity" section may set the master's torch threads (0: every core).
    threads = config.get("affinity", {}).get("master_torch_threads")
    if threads == 0:
        threads = len(available_cpus())
    return default_affinity(config["sampler"]["batch_B"], sampler, master_threads=threads,
                            device=device_label(cuda_idx))


def threads_in_slot(affinity: dict | list, config: dict) -> dict | list:
    """``affinity`` (decoded from an affinity code) with the master's optimizing torch threads
    chosen as without a code, within the slot's cores. A code gives the master one thread per
    core of its slot; instead, the config's ``affinity.master_torch_threads`` applies (0:
    every core of ``master_cpus``, N: at most N), and without that key the master decides by
    its model on the CPU, as it does without a code (:class:`rlfast.runners.master_affinity.
    MasterAffinity`: a convolutional model on every core of the slot, an MLP on one, since its
    operations last microseconds and each extra thread waits at a barrier). Measured
    (``scripts/bench/bench_threads.py``, 2 cores, ``0slt_2cpu_0gpu_2cpr_0hto`` beside one busy
    process): SAC, TD3 and DDPG on Pendulum-v1 made 99, 149 and 105 steps/s on the code's two
    pinned threads against 260-466 without the code, and DQN on CartPole 1,106-1,426 against
    4,360-4,733. Async affinities and GPU learners are returned as they are."""
    threads = config.get("affinity", {}).get("master_torch_threads")

    def fit(part: dict) -> dict:
        if "optimizer" in part or not part.get("master_cpus") or \
                part.get("cuda_idx") is not None:
            return part
        cores = len(part["master_cpus"])
        if threads is None:  # the model decides (None), unless nothing is set already
            return part if part.get("master_torch_threads") is None else \
                dict(part, master_torch_threads=None)
        return dict(part, master_torch_threads=cores if threads == 0 else min(int(threads), cores))

    return [fit(part) for part in affinity] if isinstance(affinity, list) else fit(affinity)
