"""Process helpers shared by the gateway benchmarks: free ports, pinning, readiness, CPU time."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Callable

import httpx
import psutil


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def split_cores() -> tuple[set[int] | None, set[int] | None]:
    """(the core for the process under test, the cores for everything else) — None on one core."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        return None, None
    return {cores[-1]}, set(cores[:-1])


def pinned(cores: set[int] | None) -> Callable[[], None]:
    def preexec() -> None:
        if cores:
            os.sched_setaffinity(0, cores)

    return preexec


def wait_ready(url: str, proc: subprocess.Popen[bytes], timeout: float = 90, headers: dict[str, str] | None = None) -> None:
    """Return once ``url`` answers 200; a server that never does is stopped before the error, so
    a failed benchmark leaves no process behind (callers stop only servers that came up)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{url}: process exited with {proc.returncode}")
        try:
            if httpx.get(url, timeout=1, headers=headers).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    stop(proc)
    raise RuntimeError(f"{url} not ready in {timeout:g} s (stopped)")


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process and its children (nginx: master + workers)."""
    proc = psutil.Process(pid)
    total = sum(proc.cpu_times()[:2])
    for child in proc.children(recursive=True):
        try:
            total += sum(child.cpu_times()[:2])
        except psutil.NoSuchProcess:
            pass
    return total


def rss_bytes(pid: int) -> int:
    return int(psutil.Process(pid).memory_info().rss)


def stop(*procs: subprocess.Popen[bytes]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    for proc in procs:
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def pct(xs: list[float], p: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def cpu_line() -> str:
    """The machine a figure holds for: the CPU's model name, the flags that decide which kernels
    run (AMX, AVX512-BF16, VNNI) and the core count. Every benchmark prints it first."""
    from blink.engine.cpu_features import read_cpu_features

    return f"CPU: {read_cpu_features().describe()}"
