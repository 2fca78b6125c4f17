#!/usr/bin/env bash
# Gathers what scripts/gpu_check.sh needs on a GPU machine that reaches neither a package index
# nor the data: the wheels its image lacks (DGL 2.1.0 and penman, for that machine's Python;
# their other requirements are in a CUDA image with PyTorch, and DGL's graphbolt is not
# imported, gnn_treelstm/_dgl_compat.py) and the raw data the check reads (SST's trees, SICK's
# parsed pairs, GloVe 6B 50d filtered to the data's words), about 20 MB in all:
#   bash scripts/gpu_bundle.sh --src ../shared/data --python 3.12 --wheels .whl --data shared/data
# then, on the GPU machine, from a copy of this checkout with those two folders:
#   bash scripts/gpu_check.sh --wheels .whl --out OUT --src shared/data \
#       --embeddings shared/data/glove/glove.6B.50d.filtered.txt.gz
set -euo pipefail
cd "$(dirname "$0")/.."
src="" pyver="" wheels="" data=""
while [ $# -gt 0 ]; do
    case "$1" in
        --src) src="$2"; shift 2 ;;
        --python) pyver="$2"; shift 2 ;;
        --wheels) wheels="$2"; shift 2 ;;
        --data) data="$2"; shift 2 ;;
        *) echo "gpu_bundle: unknown argument $1" >&2; exit 2 ;;
    esac
done
if [ -z "$src" ] || [ -z "$pyver" ] || [ -z "$wheels" ] || [ -z "$data" ]; then
    echo "usage: bash scripts/gpu_bundle.sh --src RAW_DATA --python X.Y --wheels DIR --data DIR" >&2
    exit 2
fi
files=(sst/trees sick/stanford_parsed glove/glove.6B.50d.filtered.txt.gz)
for f in "${files[@]}"; do
    [ -e "$src/$f" ] || {
        echo "gpu_bundle: $src/$f is missing; --src must be the raw data folder (sst/trees, sick/stanford_parsed, glove/)" >&2
        exit 2
    }
done
mkdir -p "$data"
if [ "$(realpath "$src")" = "$(realpath "$data")" ]; then
    echo "gpu_bundle: --data $data is --src itself; name another folder" >&2
    exit 2
fi
PY=${PY:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
mkdir -p "$wheels"
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version "$pyver" \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d "$wheels" \
    dgl==2.1.0 penman==1.3.1
for f in "${files[@]}"; do  # a copy made before is replaced
    mkdir -p "$data/$(dirname "$f")"
    rm -rf "${data:?}/$f"
    cp -r "$src/$f" "$data/$f"
done
du -sh "$wheels" "$data"
