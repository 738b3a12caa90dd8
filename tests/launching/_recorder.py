"""Shared by the local launcher tests: a stand-in training script, the affinity code of two
one-core run slots, and a two-variant sweep."""
import psutil
import pytest

from rlfast.launching import VariantLevel, encode_affinity, make_variants

# A stand-in training script: records what it was called with, when it ran and where it was
# pinned, then sleeps; `--fail` makes it exit 3, `--hang` makes it start a grandchild and
# sleep for a minute (to be interrupted).
RECORDER = r'''
import json, os, subprocess, sys, time
slot_code, log_dir, run_ID = sys.argv[1], sys.argv[2], sys.argv[3]
extra = sys.argv[4:]
start = time.time()
record = dict(argv=sys.argv[1:], pid=os.getpid(), slot_code=slot_code, start=start,
              cpus=sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None)
if "--hang" in extra:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    record["grandchild"] = child.pid
    with open(os.path.join(log_dir, f"started_{run_ID}.json"), "w") as f:
        json.dump(record, f)
    time.sleep(60)
time.sleep(0.3)
record["end"] = time.time()
print("hello from run", run_ID)
if "--fail" in extra:
    print("something went wrong in run", run_ID, file=sys.stderr)
    sys.exit(3)
with open(os.path.join(log_dir, f"record_{run_ID}.json"), "w") as f:
    json.dump(record, f)
'''

CODE = encode_affinity(n_cpu_core=2, n_gpu=0, cpu_per_run=1, hyperthread_offset=0)


@pytest.fixture
def recorder(tmp_path):
    """The stand-in training script, written to the test's directory; its path."""
    path = tmp_path / "recorder.py"
    path.write_text(RECORDER)
    return str(path)


def children() -> set:
    """Pids of this process's descendants."""
    return {p.pid for p in psutil.Process().children(recursive=True)}


def two_variants():
    """Two variants (lr 0.1, 0.2) and their log dirs ``lr_a``, ``lr_b``."""
    level = VariantLevel([("algo", "lr")], [[0.1], [0.2]], ["lr_a", "lr_b"])
    return make_variants(level)
