#!/usr/bin/env bash
# SNR with width and the NVFP4 comparison at widths 1024-4096 on one GPU (issue 17, about ten
# minutes on one H200). DEVICE, WIDTHS, STEPS and PY override the defaults; further arguments go to
# bench/experiments/gpu_quick.py (--layers, --seq, --batch, --lr, --models).
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-.venv/bin/python}
# shellcheck disable=SC2086  # WIDTHS is a list
exec "$PY" bench/experiments/gpu_quick.py --device "${DEVICE:-cuda}" --widths ${WIDTHS:-1024 2048 4096} \
    --steps "${STEPS:-60}" "$@"
