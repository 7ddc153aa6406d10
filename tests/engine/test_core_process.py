"""The engine-core process outlives nobody: it exits when the gateway that spawned it dies."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _engine_core_of(parent: int) -> int:
    """The pid of ``parent``'s engine-core child (multiprocessing's spawn entry point)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == parent and b"spawn_main" in cmdline:
            return int(entry.name)
    raise AssertionError(f"no engine core under pid {parent}")


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state in ("Z", "X")  # a zombie has exited; only its (dead) parent could reap it


def _serve(model: Path) -> tuple[subprocess.Popen[bytes], int]:
    port = _free_port()
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "blink.cli", "serve", "--model", str(model), "--port", str(port),
                             "--threads", "1", "--dtype", "float32"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120  # start-up on a loaded machine: a wait, not a goal
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/ready", timeout=1).status_code == 200:
                return proc, port
        except httpx.HTTPError:
            pass
        assert proc.poll() is None, "blink serve exited during start-up"
        time.sleep(0.3)
    proc.kill()
    raise AssertionError("blink serve did not become ready")


def test_engine_core_exits_when_the_gateway_is_killed(tiny_llama: Path) -> None:
    gateway, _ = _serve(tiny_llama)
    core = _engine_core_of(gateway.pid)
    try:
        gateway.send_signal(signal.SIGKILL)
        gateway.wait()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not _gone(core):
            time.sleep(0.1)
        assert _gone(core)
    finally:
        if not _gone(core):
            os.kill(core, signal.SIGKILL)


def test_sigterm_right_after_an_engine_crash_exits(tiny_llama: Path) -> None:
    gateway, _ = _serve(tiny_llama)
    core = _engine_core_of(gateway.pid)
    try:
        os.kill(core, signal.SIGKILL)  # the supervisor starts a restart; SIGTERM lands during it
        time.sleep(0.5)
        gateway.send_signal(signal.SIGTERM)
        # A clean exit (uvicorn re-raises the SIGTERM it handled once shut down), not a hang.
        assert gateway.wait(timeout=30) in (0, -signal.SIGTERM)
    finally:
        if gateway.poll() is None:
            gateway.kill()
            gateway.wait()
