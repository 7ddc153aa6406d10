#!/usr/bin/env bash
# Debian packages the tests need (idempotent). Servers are started by the tests' fixtures on
# 127.0.0.1 and stopped by PID.
set -euo pipefail
pkgs=()
# (add packages here, one array entry per line)
pkgs+=(chromium)     # dashboard test (headless, driven by PyPI playwright; never `playwright install`)
pkgs+=(prometheus)   # scrape test: a real Prometheus querying /metrics
pkgs+=(espeak-ng)     # voice: the TTS stage and the tests' synthesised speech
pkgs+=(libportaudio2) # voice: PortAudio for `blink voice --mic` (its no-microphone test runs the real library)
pkgs+=(redis-server) # rate limits shared by two gateway processes (tests/servers.py starts it)
pkgs+=(g++ ninja-build) # engine: builds the AVX-512 int8 GEMV extension (blink/engine/kernels)
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ "${#missing[@]}" -ne 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    echo "The tests need these Debian packages: ${missing[*]} — run this script as root (sudo bash .ci/system-deps.sh)." >&2
    exit 1
  fi
fi
# LlamaIndex's OpenAI client packages pin openai<3 on paper only (their code runs on openai 3.x, which
# tests/test_serve_structured_clients.py checks): installed without their own requirements, so the
# resolver cannot downgrade openai. llama-index-core itself comes with the `test` extra.
python -m pip install -q --no-deps "llama-index-llms-openai-like>=0.5" "llama-index-llms-openai>=0.6"
