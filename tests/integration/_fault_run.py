"""``python -m tests.integration._fault_run ARGS...``: ``rlfast ARGS...`` with the fault
environment registered as ``RlfastFault-v0`` (see _fault_envs.py).

It installs the default SIGINT and SIGTERM handlers first: a process started from a
background shell inherits SIGINT ignored, and the fault matrix must see what a user at a
terminal sees.
"""
import signal
import sys

signal.signal(signal.SIGINT, signal.default_int_handler)
signal.signal(signal.SIGTERM, signal.SIG_DFL)

import gymnasium  # noqa: E402

gymnasium.register("RlfastFault-v0", entry_point="tests.integration._fault_envs:FaultEnv")

from rlfast.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
