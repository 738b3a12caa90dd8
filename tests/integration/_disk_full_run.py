"""``python -m tests.integration._disk_full_run N ARGS...``: ``rlfast ARGS...`` whose N-th
training snapshot is written under a file-size limit it cannot meet.

While ``torch.save`` writes that snapshot, the process's soft ``RLIMIT_FSIZE`` is 1 KiB (with
SIGXFSZ ignored, so the kernel fails the write with EFBIG instead of killing the process),
as a full disk would fail it; the limit is lifted again afterwards, so the logs the run
writes as it ends are unaffected. Workers are other processes and keep no limit.
"""
import resource
import signal
import sys

import torch

from rlfast.cli import main

LIMIT_BYTES = 1024


def _failing_save(fail_at: int):
    """``torch.save`` that writes the ``fail_at``-th training snapshot under the limit."""
    real_save = torch.save
    seen = [0]

    def save(obj, f, *args, **kwargs):
        if not (isinstance(obj, dict) and "agent_state_dict" in obj):
            return real_save(obj, f, *args, **kwargs)
        seen[0] += 1
        if seen[0] != fail_at:
            return real_save(obj, f, *args, **kwargs)
        soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        resource.setrlimit(resource.RLIMIT_FSIZE, (LIMIT_BYTES, hard))
        try:
            real_save(obj, f, *args, **kwargs)
            f.flush()  # what the file's buffer still holds is written under the limit too
        finally:
            resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))

    return save


if __name__ == "__main__":
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    torch.save = _failing_save(int(sys.argv[1]))
    sys.exit(main(sys.argv[2:]))
