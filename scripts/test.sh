#!/usr/bin/env bash
# Set up (with the test model, qwen2.5-coder-0.5b) and run the whole test suite: unit tests with
# scripted LMs plus the `llm`-marked integration tests against a real local llama.cpp server.
# Extra arguments go to pytest, e.g.  bash scripts/test.sh -m "not llm"  (the set-up above still runs first;
# in a built .venv, `.venv/bin/python -m pytest -m "not llm"` runs the scripted-LM tests alone)
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${DSPY_FOR_TEST_MODEL:-qwen2.5-coder-0.5b} EXTRAS=${EXTRAS:-local,dev,postgres} bash scripts/setup.sh
export LITELLM_LOCAL_MODEL_COST_MAP=True HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
# the suite starts hundreds of Python processes: let them keep their bytecode (where PYTHONDONTWRITEBYTECODE is set,
# each would compile the package again and pytest would rewrite every test module again in each worker)
unset PYTHONDONTWRITEBYTECODE
# a fresh DSPy cache per run: the integration tests measure real calls, not answers cached by earlier runs
if [ -z "${DSPY_FOR_CACHE_DIR:-}" ]; then
  DSPY_FOR_CACHE_DIR=$(mktemp -d -t dspy-for-test-cache.XXXXXX)
  export DSPY_FOR_CACHE_DIR
  trap 'rm -rf "$DSPY_FOR_CACHE_DIR"' EXIT
fi
# Without a selection of your own (-m, -k, -n, -p, a path or a node id), the unit tests run on two pytest-xdist
# workers (a free worker takes tests from a busy one's queue, so a few long tests do not end the phase alone), then the llm tests in one process: each sends its requests side by side to the one local server per model
# (its parallel slots batch them), and some start servers of their own, which beside another test's would share the
# two cores (one llama.cpp job at a time)
selects=0
for arg in "$@"; do
  case "$arg" in -m|-m*|-k|-k*|-n|-n*|-p|-p*|--numprocesses*|tests*|*.py|*::*) selects=1 ;; esac
done
run() {
  local code=0
  .venv/bin/python -m pytest "$@" || code=$?
  if [ "$code" -eq 5 ]; then
    echo "pytest collected no tests" >&2
    return 1
  fi
  return "$code"
}
if [ "$selects" -eq 1 ]; then
  code=0
  run "$@" || code=$?
  exit "$code"
fi
unit=0
llm=0
run -m "not llm" -n 2 --dist worksteal "$@" || unit=$?
run -m llm -p no:xdist "$@" || llm=$?
if [ "$unit" -ne 0 ]; then exit "$unit"; fi
exit "$llm"
