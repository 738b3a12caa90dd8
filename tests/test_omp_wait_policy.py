"""Importing rlfast sets OMP_WAIT_POLICY=PASSIVE for torch's OpenMP threads (see
rlfast/__init__.py) unless the caller set it, and the variable is in place before torch loads."""
from __future__ import annotations

import os
import subprocess
import sys

CHECK = ("import os, sys; import rlfast; assert 'torch' not in sys.modules; "
         "import torch; print(os.environ['OMP_WAIT_POLICY'])")


def _policy(**env_overrides: str) -> str:
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    env.update(env_overrides)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    out = subprocess.run([sys.executable, "-c", CHECK], env=env, capture_output=True, text=True,
                         timeout=120, cwd="/")
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_rlfast_makes_openmp_wait_passively_unless_told_otherwise():
    assert _policy() == "PASSIVE"
    assert _policy(OMP_WAIT_POLICY="ACTIVE") == "ACTIVE"
