#!/usr/bin/env bash
# Wheels the GPU machine (Python 3.12, torch + transformers preinstalled, no internet) lacks for
# benchmarks/gpu_check.sh, fetched here into .gpu-wheels/ (git-ignored; pass it as a carried path).
set -euo pipefail
cd "$(dirname "$0")/.."
pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 -d .gpu-wheels \
  msgspec pydantic==2.14.4 pydantic-core==2.50.5 annotated-types typing-inspection typing-extensions==4.16.0
ls -la .gpu-wheels
