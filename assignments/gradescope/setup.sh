#!/usr/bin/env bash
# Gradescope runs this once, as root, when it builds the autograder's image: the zip made by
# `python assignments/make_gradescope.py` is unpacked into /autograder/source, which holds this
# script and the reference (ladref/, assignments/ with the hidden probes, the public tests).
#
# 1. Python 3 with venv and pip, from apt when the image lacks them.
# 2. A virtual environment in /autograder/venv: torch's CPU build first, from PyTorch's CPU index
#    at the version constraints.txt pins (a +cpu build satisfies the pin and is kept), then the
#    project with its "student" extra (pytest, hypothesis), under the same constraints.
# 3. Permissions: /autograder/source (reference solutions, hidden probes) readable by root only;
#    the venv readable by everyone, since the autograder runs submitted code as `nobody`; both
#    checked as `nobody` before the script reports success.
set -euo pipefail

SOURCE="$(cd "$(dirname "$0")" && pwd)"  # /autograder/source
ROOT="$(dirname "$SOURCE")"              # /autograder
VENV="$ROOT/venv"
TORCH_INDEX="https://download.pytorch.org/whl/cpu"
cd "$SOURCE"

if ! command -v python3 >/dev/null 2>&1 || ! python3 -m venv --clear "$VENV" >/dev/null 2>&1; then
    echo "setup.sh: installing python3, pip and venv with apt-get"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update
    apt-get install -y --no-install-recommends python3 python3-pip python3-venv
    python3 -m venv --clear "$VENV"
fi
if ! "$VENV/bin/python" -c 'import sys; sys.exit(sys.version_info < (3, 10))'; then
    echo "setup.sh: ladref needs Python 3.10 or newer; this image has $("$VENV/bin/python" --version)." >&2
    echo "setup.sh: choose a newer Ubuntu base image in the assignment's autograder settings." >&2
    exit 1
fi
if ! grep -Eq '^torch==' constraints.txt; then
    echo "setup.sh: constraints.txt pins no torch version (expected a line torch==X.Y.Z)" >&2
    exit 1
fi

PIP=("$VENV/bin/python" -m pip --no-cache-dir --disable-pip-version-check)
"${PIP[@]}" install --upgrade pip
"${PIP[@]}" install --index-url "$TORCH_INDEX" -c constraints.txt torch
"${PIP[@]}" install -c constraints.txt -e ".[student]"
# fail here, at build time, rather than on the first submission
"$VENV/bin/python" - <<'EOF'
import hypothesis, pytest, torch, ladref
print(f"setup.sh: ladref {ladref.__version__}, torch {torch.__version__}, pytest {pytest.__version__}, "
      f"hypothesis {hypothesis.__version__}")
if torch.version.cuda is not None:
    print("setup.sh: warning: torch is a CUDA build; the CPU build from PyTorch's CPU index was expected")
EOF

chmod -R go-rwx "$SOURCE"  # the reference and the hidden probes: root only (the grader runs as root)
chmod -R go+rX "$VENV"     # the interpreter and its packages: also for the sandboxed submitted code
chmod o+x "$ROOT"          # others may pass through /autograder to the venv, not list it
# the grader runs submitted code as `nobody` only if that user can run this Python with torch
# (else it warns and runs it as root, where it could read the reference): check it now
if ! (cd / && runuser -u nobody -- "$VENV/bin/python" -B -E -s -c 'import torch'); then
    echo "setup.sh: the user nobody cannot run $VENV/bin/python with torch (is Python installed in a" >&2
    echo "setup.sh: folder only root can enter?); the autograder would run submitted code as root" >&2
    exit 1
fi
if runuser -u nobody -- cat "$SOURCE/assignments/autograde.py" >/dev/null 2>&1; then
    echo "setup.sh: the user nobody can still read $SOURCE" >&2
    exit 1
fi
echo "setup.sh: done"
