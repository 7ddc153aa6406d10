#!/usr/bin/env bash
# The GPU check (issue #24) in one call on the GPU machine, within 8 minutes:
#   benchmarks/gpu_wheels.sh              # here, once: the wheels the GPU machine lacks, into .gpu-wheels/
#   benchmarks/gpu_check.sh               # there (carry .gpu-wheels): results in $OUT (results.json, results.md)
#   benchmarks/gpu_check.sh --dry-run     # anywhere: every step small, on the CPU
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/blink-gpu-check}"
WHEELS="${WHEELS:-.gpu-wheels}"
# The engine path needs msgspec and pydantic (EngineConfig) beyond what the GPU machine has
# (torch, transformers, numpy...): install the carried wheels beside it, touching nothing else.
if ! python -c "import msgspec, pydantic" 2>/dev/null; then
  python -m pip install --quiet --no-index --no-deps --no-compile --target /tmp/blink-site "$WHEELS"/*.whl
  export PYTHONPATH="/tmp/blink-site${PYTHONPATH:+:$PYTHONPATH}"
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>/dev/null | tee "$OUT.smi" || true
mkdir -p "$OUT"
[ -f "$OUT.smi" ] && mv "$OUT.smi" "$OUT/nvidia-smi.csv"
exec timeout "${GPU_CHECK_TIMEOUT:-470}" python benchmarks/gpu_check.py --out "$OUT" "$@"
