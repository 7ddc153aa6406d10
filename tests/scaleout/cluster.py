"""Processes for scale-out tests: gateway processes from a YAML config and fake model-server
replicas (tests/upstream_server.py), all on 127.0.0.1, each stopped (or killed) by its PID."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import yaml
from servers import free_port

TESTS = Path(__file__).resolve().parents[1]


class Proc:
    def __init__(self, args: list[str], port: int, env: dict[str, str] | None = None) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.proc = subprocess.Popen(args, env=dict(os.environ, **(env or {})),
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def wait_ready(self, path: str = "/health", timeout: float = 60.0) -> Proc:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                err = self.proc.stderr.read().decode()[-3000:] if self.proc.stderr else ""
                raise RuntimeError(f"process exited with {self.proc.returncode}: {err}")
            try:
                if httpx.get(self.url + path, timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"{self.url} not ready after {timeout} s")

    def kill(self) -> None:
        """SIGKILL: no graceful shutdown, no pending work finished."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill()
        if self.proc.stderr is not None:
            self.proc.stderr.close()


def replica(tokens: int = 16, delay: float = 0.0) -> Proc:
    port = free_port()
    return Proc([sys.executable, str(TESTS / "upstream_server.py"), "--port", str(port), "--tokens", str(tokens),
                 "--delay", str(delay)], port).wait_ready()


def gateway(config: dict[str, Any], tmp: Path) -> Proc:
    port = free_port()
    path = tmp / f"gateway-{port}.yaml"
    path.write_text(yaml.safe_dump(config))
    env = {"BLINK_OBS__REQUEST_LOG": "off", "OMP_NUM_THREADS": "1"}
    return Proc([sys.executable, "-m", "blink.cli", "serve", "--config", str(path), "--port", str(port),
                 "--log-level", "warning"], port, env)
