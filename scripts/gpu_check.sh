#!/usr/bin/env bash
# The GPU check of the level engine (its Triton kernels), as one command, in about 6 minutes
# (at most 11: each part's limit) on one H100 / H200 with a 16-core host:
#   1. CUDA torch, else one line and exit 2; with --wheels DIR, the wheels in DIR (DGL,
#      penman: scripts/gpu_bundle.sh gathers them for a machine without a package index)
#      installed into a temporary folder first;
#   2. the C++ loops (the CPU baseline) built, the sources side by side (at most 180 s);
#   3. scripts/gpu_check.py (its own preflight: DGL, the Triton path, the data; the SST-5
#      N-ary training epoch at batch 25 on the CPU and the GPU, then batch 256, then every
#      cell's forward + backward trees/s at batch 25; cuda.json rewritten after every row);
#   4. the CUDA tests (CUDA equals the CPU for every registry cell; no sync in a step).
# Each part has its own time limit, so a slow part loses only itself. With --out DIR the
# JSON (DIR/cuda.json) and a log of everything printed (DIR/gpu_check.log) go to DIR
# (default: docs/bench/cuda.json, no log).
#   bash scripts/gpu_check.sh [--wheels DIR] [--out DIR] [gpu_check.py options, e.g.
#       --src ../shared/data --embeddings GLOVE]
set -uo pipefail
cd "$(dirname "$0")/.."
wheels="" out=""
args=()
while [ $# -gt 0 ]; do
    case "$1" in
        --wheels) wheels="$2"; shift 2 ;;
        --out) out="$2"; shift 2 ;;
        *) args+=("$1"); shift ;;
    esac
done
if [ -n "$out" ]; then
    mkdir -p "$out"
    exec > >(tee -a "$out/gpu_check.log") 2>&1
    args+=(--json "$out/cuda.json")
fi
# the interpreter that holds CUDA torch: $PY, else a project .venv, else python3
PY=${PY:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
if [ -n "$wheels" ]; then
    site=$(mktemp -d)
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" \
        "$wheels"/*.whl || { echo "gpu_check: the wheels in $wheels do not install" >&2; exit 2; }
    export PYTHONPATH="$PYTHONPATH:$site"
fi
"$PY" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)" || {
    echo "gpu_check: torch $("$PY" -c 'import torch; print(torch.__version__)' 2>&1 | tail -n 1) sees no CUDA device (a CPU build of torch, or no driver); stopping" >&2
    exit 2
}
start=$SECONDS
timeout 180 "$PY" -c "from gnn_treelstm.kernels import native; print(native.build())" \
    || echo "gpu_check: the C++ loops did not build (the preflight says why)" >&2
echo "gpu_check: C++ loops ready after $((SECONDS - start)) s"
status=0
# four epochs (CPU, untimed warm-up, batch 25, batch 256) and the cells, each limited
timeout 360 "$PY" scripts/gpu_check.py --device cuda --epoch-timeout 60 --cells-timeout 120 \
    ${args[@]+"${args[@]}"} || status=$?
timeout 150 "$PY" -m pytest -q --tb=line -m cuda -p no:cacheprovider \
    tests/cells/test_registry.py tests/engine || status=$?
echo "gpu_check: done after $((SECONDS - start)) s, status $status"
exit "$status"
