"""Helpers shared by the benchmark scripts in this folder."""
from __future__ import annotations

import os
import platform
import time


def machine() -> str:
    """One line naming the CPU, core count, GPU (if any), Python and torch versions."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    import torch
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    return (f"{cpu}, {os.cpu_count()} cores, {gpu}, Python {platform.python_version()}, "
            f"torch {torch.__version__}, {platform.system()} {platform.release()}")


def rate(step, items_per_call: int, seconds: float) -> float:
    """Items per second of repeated ``step()`` over about ``seconds`` (after one warm-up)."""
    step()
    calls, start = 0, time.perf_counter()
    while True:
        step()
        calls += 1
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return calls * items_per_call / elapsed
