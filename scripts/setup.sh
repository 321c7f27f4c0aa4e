#!/usr/bin/env bash
# Set up .venv on a fresh machine: the CPU build of torch first (a bare `torch` requirement could pull a
# multi-GB CUDA build), then hf_xcv in editable mode with its test and data extras.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check --upgrade pip
.venv/bin/python -m pip install -q --disable-pip-version-check "torch==2.13.0"
.venv/bin/python -m pip install -q --disable-pip-version-check -e ".[test]"
# The oldest transformers pyproject.toml allows, beside the venv (its dependencies are the venv's): the remote-code
# tests (tests/hub/test_remote_code.py) load saved models with it too, putting this folder first on PYTHONPATH.
OLDEST_TRANSFORMERS=5.24.0
if [ ! -d ".cache/transformers-oldest/transformers-$OLDEST_TRANSFORMERS.dist-info" ]; then
    rm -rf .cache/transformers-oldest
    .venv/bin/python -m pip install -q --disable-pip-version-check --no-deps --target .cache/transformers-oldest \
        "transformers==$OLDEST_TRANSFORMERS"
fi
