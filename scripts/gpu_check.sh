#!/usr/bin/env bash
# The GPU check of the level engine (its Triton kernels), as one command, in about 6 minutes
# and at most --budget seconds (default 585) on one H100 / H200 with a 16-core host:
#   1. CUDA torch, else one line and exit 2; with --wheels DIR, the wheels in DIR (DGL,
#      penman: scripts/gpu_bundle.sh gathers them for a machine without a package index)
#      installed into a temporary folder first;
#   2. the C++ loops (the CPU baseline) built, the sources side by side (at most 180 s; a
#      failed build skips step 3);
#   3. scripts/gpu_check.py (at most 360 s; its own preflight: DGL, the Triton path, the
#      data; the SST-5 N-ary training epoch at batch 25 on the CPU and the GPU, then batch
#      256, then every cell's forward + backward trees/s at batch 25; cuda.json rewritten
#      after every row);
#   4. the CUDA tests (at most 150 s; CUDA equals the CPU for every registry cell; no sync
#      in a step).
# Each part has its own limit, cut to what is left of the budget, so a slow part loses only
# itself and the whole ends within the budget. With --out DIR the JSON (DIR/cuda.json) and
# a log of everything printed (DIR/gpu_check.log) go to DIR (default: docs/bench/cuda.json,
# no log).
#   bash scripts/gpu_check.sh [--wheels DIR] [--out DIR] [--budget SECONDS]
#       [gpu_check.py options, e.g. --src ../shared/data --embeddings GLOVE]
set -uo pipefail
cd "$(dirname "$0")/.."
wheels="" out="" budget=585
args=()
while [ $# -gt 0 ]; do
    case "$1" in
        --wheels) wheels="$2"; shift 2 ;;
        --out) out="$2"; shift 2 ;;
        --budget) budget="$2"; shift 2 ;;
        *) args+=("$1"); shift ;;
    esac
done
tee_pid=""
if [ -n "$out" ]; then
    mkdir -p "$out"
    exec > >(tee -a "$out/gpu_check.log") 2>&1
    tee_pid=$!
    args+=(--json "$out/cuda.json")
fi
finish() {  # exit with $1 once the log holds every line (bash does not wait for tee)
    if [ -n "$tee_pid" ]; then
        exec >&- 2>&-
        wait "$tee_pid"
    fi
    exit "$1"
}
limit() {  # $1 seconds, or what is left of the budget if less
    local left=$((budget - SECONDS))
    [ "$left" -lt 1 ] && left=1
    [ "$1" -lt "$left" ] && echo "$1" || echo "$left"
}
# the interpreter that holds CUDA torch: $PY, else a project .venv, else python3
PY=${PY:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
if [ -n "$wheels" ]; then
    site=$(mktemp -d)
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" \
        "$wheels"/*.whl || {
        echo "gpu_check: the wheels in $wheels do not install for $("$PY" -V 2>&1); gather them for this Python with scripts/gpu_bundle.sh --python X.Y" >&2
        finish 2
    }
    export PYTHONPATH="$PYTHONPATH:$site"
fi
"$PY" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)" || {
    echo "gpu_check: torch $("$PY" -c 'import torch; print(torch.__version__)' 2>&1 | tail -n 1) sees no CUDA device (a CPU build of torch, or no driver); stopping" >&2
    finish 2
}
status=0
if timeout "$(limit 180)" "$PY" -c "from gnn_treelstm.kernels import native; native.build()"
then
    echo "gpu_check: C++ loops built after $SECONDS s"
    # four epochs (CPU, untimed warm-up, batch 25, batch 256) and the cells, each limited
    timeout -s INT -k 10 "$(limit 360)" "$PY" scripts/gpu_check.py --device cuda \
        --epoch-timeout 60 --cells-timeout 120 ${args[@]+"${args[@]}"} || status=$?
else
    echo "gpu_check: the C++ loops did not build (above), so no CPU baseline: the CUDA tests only" >&2
    export GNN_TREELSTM_NATIVE=off  # no test process builds them again
    status=2
fi
# SIGINT first: pytest then prints the summary of what it ran
timeout -s INT -k 10 "$(limit 150)" "$PY" -m pytest -q --tb=line -m cuda -p no:cacheprovider \
    tests/cells/test_registry.py tests/engine || status=$?
echo "gpu_check: done after $SECONDS s, status $status"
finish "$status"
