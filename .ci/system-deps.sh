#!/usr/bin/env bash
# Debian packages the tests need (idempotent). Servers are started by the tests' fixtures on
# 127.0.0.1 and stopped by PID.
set -euo pipefail
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  pkgs=()
  # (add packages here, one array entry per line)
  pkgs+=(chromium)     # dashboard test (headless, driven by PyPI playwright; never `playwright install`)
  pkgs+=(prometheus)   # scrape test: a real Prometheus querying /metrics
  pkgs+=(redis-server) # rate limits shared by two gateway processes (tests/servers.py starts it)
  if [ "${#pkgs[@]}" -gt 0 ]; then
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null
  fi
fi
