"""``python -m tests.integration._async_fault_run LOG_DIR MARKER PID_DIR``: an asynchronous DQN
run (``AsyncRlEval``, ``AsyncCpuSampler`` with two workers, the environment of
_async_fault_envs.py) that trains until it is interrupted, for the Ctrl-C test of
test_async_faults.py.

It installs the default SIGINT handler first (a process started from a background shell
inherits SIGINT ignored, and the test must see what a user at a terminal sees). The first
training environment to reach step 300 creates MARKER; every environment process records its
pid in PID_DIR. On ``KeyboardInterrupt`` it prints ``ASYNC-RUN: KeyboardInterrupt`` and exits
with 130, as a shell reports Ctrl-C.
"""
import signal
import sys

signal.signal(signal.SIGINT, signal.default_int_handler)
signal.signal(signal.SIGTERM, signal.SIG_DFL)

from rlfast.utils.logging import logger_context  # noqa: E402
from tests.integration._async_fault_envs import make_async_fault_env  # noqa: E402
from tests.integration._async_helpers import small_dqn_runner  # noqa: E402

MARK_AT = 300


def main(log_dir: str, marker: str, pid_dir: str) -> int:
    runner = small_dqn_runner("cpu", n_steps=100_000_000, log_interval_steps=1_600,
                              EnvCls=make_async_fault_env,
                              env_kwargs=dict(mark_at=MARK_AT, marker=marker, pid_dir=pid_dir))
    try:
        with logger_context(log_dir, 0, "async_sigint", {}, override_prefix=True):
            runner.train()
    except KeyboardInterrupt:
        print("ASYNC-RUN: KeyboardInterrupt", flush=True)
        return 130
    print("ASYNC-RUN: finished", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
