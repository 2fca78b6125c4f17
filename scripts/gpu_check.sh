#!/usr/bin/env bash
# The GPU check of the level engine (its Triton kernels), as one command, in under 8 minutes on
# one H100 / H200 with a 16-core host: the CUDA tests, then scripts/gpu_check.py (every cell's
# forward + backward trees/s on the GPU against the CPU's threads at batch 25, and the SST-5
# N-ary training epoch at batch 25 and 256), which writes docs/bench/cuda.json.
#   bash scripts/gpu_check.sh [gpu_check.py options, e.g. --src ../shared/data --embeddings GLOVE]
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
[ -x "$PY" ] || PY=python
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
status=0
timeout 180 "$PY" -m pytest -q -m cuda -p no:cacheprovider tests/cells/test_registry.py \
    tests/engine || status=$?
timeout 290 "$PY" scripts/gpu_check.py --device cuda "$@" || status=$?
exit "$status"
