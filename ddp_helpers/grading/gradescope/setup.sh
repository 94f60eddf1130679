#!/usr/bin/env bash
# DDP Basics: Gradescope's autograder for lesson @LESSON@. Gradescope runs this once, as root,
# when it builds the autograder's image: Python 3.11 or newer, a virtual environment in
# .venv with CPU-only torch and the course's package at the versions of constraints.txt,
# then a check of what was installed (python -m ddp_helpers.grading.gradescope setup).
#   bash setup.sh --skip-install   only that check, with $PYTHON: an environment that
#                                  already holds the package and torch (the course's tests)
# TORCH_INDEX_URL: another index for torch (default: PyTorch's CPU-only wheels).
set -euo pipefail
SOURCE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$SOURCE"

python_311() {  # the first Python 3.11 or newer
  local py
  for py in ${PYTHON:-} python3.13 python3.12 python3.11 python3; do
    if command -v "$py" >/dev/null 2>&1 &&
      "$py" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
      command -v "$py"
      return 0
    fi
  done
  return 1
}

if [ "${1:-}" != "--skip-install" ]; then
  if ! python_311 >/dev/null; then  # Ubuntu 22.04: Python 3.10, with a 3.11 beside it
    apt-get update -qq && apt-get install -y -qq python3.11 python3.11-venv
  fi
  PY="$(python_311)" || {
    echo "setup.sh: no Python 3.11 or newer: choose Gradescope's Ubuntu 24.04 base image" >&2
    exit 1
  }
  if ! "$PY" -m venv "$SOURCE/.venv"; then  # Ubuntu's venv module is a package of its own
    rm -rf "$SOURCE/.venv"
    minor="$("$PY" -c 'import sys; print(sys.version_info[1])')"
    apt-get update -qq && apt-get install -y -qq "python3.$minor-venv"
    "$PY" -m venv "$SOURCE/.venv"
  fi
  PIP=("$SOURCE/.venv/bin/python" -m pip install --no-cache-dir --disable-pip-version-check)
  # torch alone from PyTorch's CPU index (PyPI's Linux build brings CUDA: gigabytes); its
  # dependencies then come from PyPI at the course's pins, with the package.
  "${PIP[@]}" --no-deps --index-url "${TORCH_INDEX_URL:-@TORCH_INDEX@}" "torch==@TORCH@"
  "${PIP[@]}" -c constraints.txt "./dist/@WHEEL@@EXTRAS@"
  "$SOURCE/.venv/bin/python" -m pip check
  PYTHON="$SOURCE/.venv/bin/python"
fi
PY="$(python_311)" || { echo "setup.sh: no Python 3.11 or newer (set PYTHON)" >&2; exit 1; }
exec "$PY" -m ddp_helpers.grading.gradescope setup "$SOURCE"
