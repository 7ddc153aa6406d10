"""``embeddings.py --vs-infinity``: Blink's default /v1/embeddings against infinity-emb, same model.

Both servers serve the packaged all-MiniLM-L6-v2 folder under the same name, are pinned to the
same core(s), and are loaded one at a time by the same aiohttp client in alternating rounds
(medians reported), so drift on a shared machine hits both alike. Before timing anything it
embeds the benchmark's sentences on both and prints the cosine between them: a throughput
comparison means nothing unless both compute the same vectors.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx
import numpy as np
import yaml
from _proc import cpu_seconds, free_port, pct, pinned, split_cores, stop, wait_ready

from blink.engine.cpu_features import read_cpu_features
from blink.modelserver.embedder import DEFAULT_MODEL, resolve_model_dir

ROOT = Path(__file__).resolve().parent.parent
CONCURRENCY = (1, 16)
Drive = Callable[[str, int, int, str | None], Awaitable[tuple[list[float], float, int]]]


def blink_server(tmp: Path, port: int, core: set[int] | None) -> subprocess.Popen[bytes]:
    cfg = {
        "server": {"port": port, "log_level": "warning"},
        # No generation here: the model entry only satisfies the config.
        "models": [{"name": "none", "kind": "openai_http", "base_url": "http://127.0.0.1:9/v1"}],
        "model_server": {"embeddings": True},
        "obs": {"request_log": "off"},
    }
    path = tmp / "blink.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return subprocess.Popen([sys.executable, "-m", "blink.cli", "serve", "--config", str(path)], cwd=ROOT,
                            preexec_fn=pinned(core), stdout=subprocess.DEVNULL)  # fmt: skip


def infinity_server(exe: str, port: int, core: set[int] | None) -> subprocess.Popen[bytes]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "INFINITY_ANONYMOUS_USAGE_STATS": "0", "DO_NOT_TRACK": "1"}
    env.pop("PYTHONPATH", None)  # its own venv, its own transformers
    cmd = [exe, "v2", "--model-id", str(resolve_model_dir(DEFAULT_MODEL)), "--served-model-name", DEFAULT_MODEL,
           "--engine", "torch", "--device", "cpu", "--host", "127.0.0.1", "--port", str(port), "--url-prefix", "/v1",
           "--log-level", "warning"]  # fmt: skip
    return subprocess.Popen(cmd, env=env, preexec_fn=pinned(core), stdout=subprocess.DEVNULL)


def vectors(url: str, texts: list[str]) -> np.ndarray:
    r = httpx.post(f"{url}/v1/embeddings", json={"model": DEFAULT_MODEL, "input": texts, "encoding_format": "float"},
                   timeout=60)  # fmt: skip
    r.raise_for_status()
    rows = np.asarray([d["embedding"] for d in sorted(r.json()["data"], key=lambda d: d["index"])], dtype=np.float64)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def vs_infinity(exe: str, requests: int, rounds: int, drive: Drive, sentences: list[str]) -> None:
    if not Path(exe).exists():
        raise SystemExit(f"{exe} not found: install infinity-emb in its own venv (see embeddings.py --help)")
    print(f"CPU: {read_cpu_features().describe()}")  # before pinning: the machine's cores, not ours
    server_core, other = split_cores()
    if other:
        os.sched_setaffinity(0, other)
    print(f"cores: servers {server_core or 'any'}; load generator {other or 'any'}")
    tmp = Path(tempfile.mkdtemp(prefix="blink-vs-infinity-"))
    procs: dict[str, tuple[subprocess.Popen[bytes], int]] = {}
    try:
        for name in ("blink", "infinity"):  # one after the other: each loads its model alone
            port = free_port()
            proc = blink_server(tmp, port, server_core) if name == "blink" else infinity_server(exe, port, server_core)
            procs[name] = (proc, port)
            wait_ready(f"http://127.0.0.1:{port}/v1/models", proc, timeout=300)
        urls = {name: f"http://127.0.0.1:{port}" for name, (_, port) in procs.items()}
        cos = (vectors(urls["blink"], sentences) * vectors(urls["infinity"], sentences)).sum(axis=1)
        print(f"same vectors: cosine Blink vs infinity on {len(sentences)} sentences, min {cos.min():.6f}")
        runs: dict[tuple[str, int], list[tuple[float, float, float, int, float]]] = {}
        for conc in CONCURRENCY:
            n = requests if conc == 1 else requests * 4
            for _ in range(rounds):
                for name, (proc, _port) in procs.items():
                    cpu0 = cpu_seconds(proc.pid)
                    lat, wall, errors = asyncio.run(drive(f"{urls[name]}/v1/embeddings", conc, n, DEFAULT_MODEL))
                    cpu_ms = (cpu_seconds(proc.pid) - cpu0) / (n + min(20, n)) * 1000  # warm-up included
                    runs.setdefault((name, conc), []).append((len(lat) / wall, pct(lat, 50), pct(lat, 99), errors, cpu_ms))
        rows = {k: tuple(statistics.median(r[i] for r in v) for i in range(5)) for k, v in runs.items()}
        print(f"medians of {rounds} alternating rounds, one short sentence per request")
        print(f"{'server':<10}{'conc':>5}{'req/s':>9}{'p50 ms':>9}{'p99 ms':>9}{'errors':>8}{'CPU ms/req':>12}")
        for (name, conc), (rps, p50, p99, err, cpu_ms) in rows.items():
            print(f"{name:<10}{conc:>5}{rps:>9.0f}{p50:>9.2f}{p99:>9.2f}{err:>8.0f}{cpu_ms:>12.2f}")
        for conc in CONCURRENCY:
            b, i = rows["blink", conc], rows["infinity", conc]
            print(f"concurrency {conc:>2}: Blink/infinity throughput {b[0] / i[0]:.2f}x, p50 {b[1]:.2f} vs {i[1]:.2f} ms, "
                  f"p99 {b[2]:.2f} vs {i[2]:.2f} ms")  # fmt: skip
        b, i = rows["blink", 16], rows["infinity", 16]
        print(f"goal at concurrency 16: throughput >= 1.2x infinity's -> {b[0] / i[0]:.2f}x "
              f"({'met' if b[0] >= 1.2 * i[0] else 'NOT met'}); p99 <= infinity's -> {b[2]:.2f} vs {i[2]:.2f} ms "
              f"({'met' if b[2] <= i[2] else 'NOT met'})")  # fmt: skip
    finally:
        stop(*(p for p, _ in procs.values()))
