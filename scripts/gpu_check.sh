#!/usr/bin/env bash
# The GPU check of the level engine (its Triton kernels), as one command, in under 6 minutes on
# one H100 / H200 with a 16-core host: a preflight (CUDA torch, else one line and exit 2), then
# scripts/gpu_check.py (its own preflight: DGL, the C++ loops, the data; the SST-5 N-ary
# training epoch at batch 25 on the CPU and the GPU, then batch 256, then every cell's forward +
# backward trees/s at batch 25; docs/bench/cuda.json rewritten after every row), then the CUDA
# tests.
#   bash scripts/gpu_check.sh [gpu_check.py options, e.g. --src ../shared/data --embeddings GLOVE]
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
[ -x "$PY" ] || PY=python
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
"$PY" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)" || {
    echo "gpu_check: torch $("$PY" -c 'import torch; print(torch.__version__)') sees no CUDA device (a CPU build of torch, or no driver); stopping" >&2
    exit 2
}
status=0
timeout 250 "$PY" scripts/gpu_check.py --device cuda --epoch-timeout 60 --cells-timeout 60 \
    "$@" || status=$?
timeout 100 "$PY" -m pytest -q -m cuda -p no:cacheprovider tests/cells/test_registry.py \
    tests/engine || status=$?
exit "$status"
