#!/usr/bin/env bash
# Run the torch-touching parts of the test suite on the oldest torch rlfast supports.
#
#   bash scripts/check_torch_floor.sh                 # setup.py's floor (torch, numpy, gymnasium, ale-py)
#   bash scripts/check_torch_floor.sh --torch 2.11.0  # any other torch release from the registry
#   bash scripts/check_torch_floor.sh -- -k ddp       # extra arguments after -- go to pytest
#
# The floor is read from setup.py (`torch>=X`), so the version tested here is the version
# declared there. numpy, gymnasium and ale-py are installed at the oldest minor release
# setup.py admits (`numpy>=1.23` -> `numpy==1.23.*`). Everything goes into a virtual
# environment of its own (removed afterwards unless --keep), never into the one you work in.
#
# The registry's torch wheels for Linux other than the local CPU build are CUDA builds
# (torch plus about 2 GB of nvidia-* wheels). They are downloaded once per machine into
# $RLFAST_WHEEL_CACHE (default ~/.cache/rlfast/torch-wheels) and installed from there
# offline on later runs. This is why the check is not part of .ci/run.
#
# Exit status: pytest's (0 when every selected test passed or skipped).
set -euo pipefail
cd "$(dirname "$0")/.."

TORCH=""
KEEP=0
PYTEST_ARGS=()
while [[ $# -gt 0 ]]; do
    case "$1" in
        --torch) TORCH="${2:?--torch needs a version}"; shift 2 ;;
        --keep) KEEP=1; shift ;;
        --) shift; PYTEST_ARGS=("$@"); break ;;
        -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
        *) echo "check_torch_floor.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done

PY="${PYTHON:-python3}"
# The lower bounds setup.py declares, as "name version" lines.
FLOORS="$("$PY" - <<'EOF'
import re
text = open("setup.py").read()
block = re.search(r"install_requires=\[(.*?)\]", text, re.S).group(1)
for name in ("torch", "numpy", "gymnasium", "ale-py"):
    m = re.search(r'"%s>=([0-9][0-9.]*)' % re.escape(name), block)
    if m is None:
        raise SystemExit(f"setup.py declares no lower bound for {name}")
    print(name, m.group(1))
EOF
)"
floor() { awk -v n="$1" '$1 == n {print $2}' <<<"$FLOORS"; }
TORCH_FLOOR="$(floor torch)"
TORCH="${TORCH:-$TORCH_FLOOR}"
NUMPY="numpy==$(floor numpy).*"
GYM="gymnasium==$(floor gymnasium).*"
ALE="ale-py==$(floor ale-py).*"

CACHE="${RLFAST_WHEEL_CACHE:-$HOME/.cache/rlfast/torch-wheels}"
VENV="${TMPDIR:-/tmp}/rlfast-torch-$TORCH-venv"
mkdir -p "$CACHE"
cleanup() { if [[ $KEEP -eq 0 ]]; then rm -rf "$VENV"; fi; }
trap cleanup EXIT

echo "== torch $TORCH (setup.py's floor: $TORCH_FLOOR), $NUMPY, $GYM, $ALE"
echo "== wheel cache: $CACHE"
# Download once: pip keeps files already in the folder and fetches only what is missing.
"$PY" -m pip download --quiet --only-binary=:all: -d "$CACHE" "torch==$TORCH"

rm -rf "$VENV"
"$PY" -m venv "$VENV"
VPY="$VENV/bin/python"
"$VPY" -m pip install --quiet --upgrade pip
"$VPY" -m pip install --quiet --no-index --find-links "$CACHE" "torch==$TORCH"
# The project without its dependencies, then the floor releases of the others and pytest.
"$VPY" -m pip install --quiet --no-deps -e .
"$VPY" -m pip install --quiet "torch==$TORCH" "$NUMPY" "$GYM" "$ALE" \
    "opencv-python>=4.7" "psutil>=5.9" "pyprind>=2.11" "pytest>=7"
"$VPY" - <<'EOF'
import gymnasium, numpy, torch
print(f"== installed: torch {torch.__version__}, numpy {numpy.__version__}, "
      f"gymnasium {gymnasium.__version__}")
EOF

# The parts of the suite that call torch's APIs: DDP and the process group, runners,
# agents, algorithms, models, samplers, and snapshot loading (weights_only).
TESTS=(tests/utils/test_distributed.py tests/utils/test_torch_compat.py tests/runners
       tests/agents tests/algos tests/models tests/samplers tests/utils/test_snapshot.py tests/utils/test_logging_resume.py
       tests/utils/test_tensor.py tests/learning/test_sync_learning.py)
set +e
"$VPY" -m pytest -q -p no:cacheprovider "${TESTS[@]}" "${PYTEST_ARGS[@]}"
status=$?
set -e
echo "== torch $TORCH: pytest exit $status"
exit $status
