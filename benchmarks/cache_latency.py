"""Cache-hit latency through a real ``blink serve`` process, with 100k entries in the index.

Starts the test upstream (``tests/upstream_server.py``, 32 tokens per answer), fills a SQLite
cache file with real questions (embedded by the served embedder) plus ``--entries`` filler
entries in the same namespace, starts ``blink serve --semantic-cache`` pinned to one core and
measures from the other core, HTTP in to the last byte out, streaming:

- exact hit: a question asked before, word for word;
- semantic hit: a paraphrase the hit guard accepts;
- miss: a new question, which goes to the upstream (the baseline a hit is compared with);
- the miss path's own cost: ``ResponseCache.lookup`` (embedding + search) on a miss, in process
  (a child process that imports the checkout's ``blink``, wired as ``blink serve`` wires it).

    python benchmarks/cache_latency.py [--entries 100000] [--requests 300] [--before DIR] [--head-start] [--quick]

``--before DIR`` (a checkout of an earlier commit) starts that checkout's gateway too, on the same
core with a copy of the same cache file, and alternates every request between the two: the
"now vs before" ratios are measured side by side; so are the in-process lookups and their steps
(in blocks of 10 rounds alternating between a process per checkout, pinned to the client core). Likewise
``--head-start`` adds a gateway with ``cache.semantic.head_start`` on: its misses call the upstream
while the embedding runs, its semantic hits cancel that call; the miss and hit figures with vs
without it are measured side by side.

The goals are for an idle core, so they are read with this checkout's gateway alone on the server
core (the default). Every extra gateway shares that core, and work it does after answering (a
head-start hit cuts its upstream call) lands in the next request's time: with the head-start
gateway alternating, the default gateway's semantic-hit p99 read 5.9-6.9 ms; alone, 3.2-3.6 ms
(benchmarks/RESULTS.md, session 8).

The gateways load the file and build their HNSW graphs on every core, and are pinned to the
server core once ready (the graph builds dominate the run time otherwise).

Goals (issue #4): semantic hit p99 <= 5 ms, exact hit p99 <= 1 ms, miss path <= 3 ms p50.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import uvloop
from _proc import free_port, wait_ready

from blink.config.gateway import CacheSettings
from blink.config.model_server import BatchingSettings
from blink.gateway.cache import keys
from blink.gateway.cache.entry import CachedChoice, CachedResponse
from blink.gateway.cache.guard import same_answer
from blink.gateway.cache.stage import CacheDirectives, ResponseCache
from blink.gateway.cache.stores.sqlite import SQLiteCacheStore
from blink.gateway.chat.request_mapping import chat_request
from blink.gateway.front_builder import build_matcher
from blink.gateway.http.request_parsing import validate
from blink.modelserver.build import batch_config
from blink.modelserver.clients import EncoderClient
from blink.modelserver.encoder import OnnxEncoder
from blink.modelserver.server import ServedModels
from blink.protocol.chat import ChatCompletionRequest

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "semantic-cache" / "pairs-dev.jsonl"
MODEL = "fake"


# The head-start comparison's upstream answer: one token after 20 ms (a small model's time to first
# token on this CPU is 20-150 ms, RESULTS.md), set per request through the test upstream's ``user``
# field, which the cache key ignores.
SLOW_UPSTREAM = "tokens=1;delay=0.02"


def bench_settings(tmp: Path, onnx_dir: str, entries: int) -> CacheSettings:
    """Exact + semantic cache in a SQLite file under ``tmp``, room for ``entries`` plus the dev set."""
    return CacheSettings.model_validate({
        "exact": {"enabled": True}, "semantic": {"enabled": True, "onnx_dir": onnx_dir},
        "path": str(tmp / "cache.db"), "max_entries": entries + 10_000,
    })  # fmt: skip


def load_pairs() -> list[dict[str, Any]]:
    return [json.loads(line) for line in DATA.read_text().splitlines() if line]


def _body(question: str, user: str | None = None) -> dict[str, Any]:
    body = {"model": MODEL, "messages": [{"role": "user", "content": question}], "temperature": 0, "stream": True}
    return body if user is None else {**body, "user": user}


def _request(question: str):  # type: ignore[no-untyped-def]
    raw = _body(question)
    raw.pop("stream")
    return chat_request(validate(ChatCompletionRequest, raw), raw, MODEL, 1 << 20, None)


async def _fill(settings: CacheSettings, pairs: list[dict[str, Any]], entries: int) -> tuple[list[str], list[str]]:
    """Real questions (exact + semantic targets) and ``entries`` filler rows, one namespace."""
    store = SQLiteCacheStore(Path(settings.path), max_entries=entries + 10_000)
    matcher = build_matcher(settings)
    cache = ResponseCache(store, settings, matcher)
    await cache.start()
    answer = CachedResponse("chat", [CachedChoice(" cached answer" * 8, "stop")], 10, 16)
    items: list[tuple[str, bytes, np.ndarray | None, CachedResponse]] = []
    exact: list[str] = []
    semantic: list[str] = []
    ns = ""
    for p in pairs:
        look = await cache.lookup(_request(p["a"]), "default", CacheDirectives(lookup=False))
        ns = look.ns
        resp = CachedResponse("chat", answer.choices, 10, 16, query=look.query)
        items.append((look.ns, look.key, look.vec, resp))
        exact.append(p["a"])
        if p["same_answer"] and look.vec is not None:
            vb = await matcher.embed(p["b"])
            score = float(np.dot(vb, look.vec))
            if score >= matcher.threshold and same_answer(p["b"], p["a"], score):
                semantic.append(p["b"])
    rng = np.random.default_rng(0)
    for i in range(entries):
        v = rng.standard_normal(matcher.embedder.dim).astype(np.float32)
        items.append((ns, f"filler-{i}".encode(), v / np.linalg.norm(v), CachedResponse("chat", answer.choices, query=f"filler question {i}")))
    await store.put_many(items, ttl=86_400)
    await cache.aclose()
    return exact, semantic


async def _open_cache(settings: CacheSettings) -> tuple[ResponseCache, OnnxEncoder, ServedModels]:
    """The cache as ``blink serve`` wires it: the model server's batched encoder as the embedder.
    Starting it loads the file and builds the HNSW graph."""
    sem = settings.semantic
    encoder = OnnxEncoder(sem.model, sem.onnx_dir, sem.quantize)
    models = ServedModels()
    client = EncoderClient(models.add_encoder(sem.model, encoder, batch_config(BatchingSettings())))
    store = SQLiteCacheStore(Path(settings.path), max_entries=10**7)
    cache = ResponseCache(store, settings, build_matcher(settings, client))
    await cache.start()
    return cache, encoder, models


async def _lookup_once(cache: ResponseCache, kind: str, q: str, out: dict[str, list[float]]) -> None:
    """One ``ResponseCache.lookup``, kept under ``kind`` if that is its outcome (a few paraphrases
    normalise to a stored question: exact, not semantic)."""
    req, opened = _request(q), []
    t0, c0 = time.perf_counter(), time.process_time()
    # before_embed: where cache.semantic.head_start would open the backend call.
    look = await cache.lookup(req, "default", CacheDirectives(), partial(_stamp, opened))
    ms, cpu = (time.perf_counter() - t0) * 1000, (time.process_time() - c0) * 1000
    if look.outcome == kind:
        out.setdefault(kind, []).append(ms)
        out.setdefault(kind + "_cpu", []).append(cpu)
        if kind == "miss":
            out.setdefault("head start", []).append((opened[0] - t0) * 1000)


def _lookup_child(spec_file: str) -> None:
    """``--lookup-child SPEC``: the cache stage of one checkout, in this process, timed on command.

    Started by ``_LookupChild`` with that checkout's ``blink`` first on ``sys.path``; prints
    ``ready`` once loaded, then answers each stdin line (a JSON ``[kind, question]``) with ``ok``
    after one lookup, ``["stages", i]`` after round ``i`` of the step-by-step timings, and
    ``["end"]`` with the timings as one JSON line."""
    spec = json.loads(Path(spec_file).read_text())

    async def run() -> None:
        settings = CacheSettings.model_validate(spec["settings"])
        cache, encoder, models = await _open_cache(settings)
        out: dict[str, list[float]] = {}
        print("ready", flush=True)
        for line in sys.stdin:  # blocking between lookups: nothing else runs on this loop meanwhile
            cmd = json.loads(line)
            if cmd[0] == "end":
                break
            if cmd[0] == "stages":
                await _stages(cache, encoder, spec["semantic"], range(cmd[1], cmd[1] + 1), out)
            else:
                await _lookup_once(cache, cmd[0], cmd[1], out)
            print("ok", flush=True)
        print(json.dumps(out), flush=True)
        await cache.aclose()
        models.close()

    # The loop blink serve runs (uvicorn's loop="uvloop"): the embedding's hand-back to it is a
    # cross-thread wake-up, which costs differently on asyncio's default loop.
    uvloop.run(run())


# Lines a lookup child may print before ``ready`` (its CPU line, a library's warning).
_MAX_PREAMBLE_LINES = 50


class _LookupChild:
    """A ``--lookup-child`` process for one checkout: its ``blink`` and its own copy of this script
    (whose imports follow that checkout's layout; the lookup protocol is the same)."""

    def __init__(self, checkout: Path, spec_file: Path) -> None:
        bench = checkout / "benchmarks"
        code = (f"import runpy, sys; sys.path[:0] = [{str(checkout)!r}, {str(bench)!r}]; "
                f"sys.argv = ['cache_latency.py', '--lookup-child', {str(spec_file)!r}]; "
                f"runpy.run_path({str(bench / 'cache_latency.py')!r}, run_name='__main__')")
        self.proc = subprocess.Popen([sys.executable, "-c", code], cwd=checkout, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)  # fmt: skip

    def _read(self) -> str:
        line = self.proc.stdout.readline() if self.proc.stdout else ""
        if not line:
            raise RuntimeError(f"lookup child {self.proc.pid} exited (rc {self.proc.poll()})")
        return line.strip()

    def wait_ready(self) -> None:
        """Skip what the child prints before ``ready``: an older checkout's script prints its CPU
        line first even as a lookup child (a line of output per start, bounded)."""
        for _ in range(_MAX_PREAMBLE_LINES):
            if self._read() == "ready":
                return
        raise RuntimeError(f"lookup child {self.proc.pid} printed no 'ready'")

    def ask(self, *cmd: object) -> str:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        return self._read()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=30)


# Rounds (exact + semantic + miss lookup) a lookup process runs before the other checkout's takes
# over. Every lookup alternating measured each one just after the other process had run on the core:
# 0.5-0.6 ms over the sum of its steps (3.24 vs 2.66 ms p50), where one process alone (as this script
# measured before --before compared lookups) left ~0.3 ms; 10-round blocks (30 per checkout over 300
# rounds) keep the side-by-side drift cancelling while each block runs as a lone process would.
_BLOCK = 10


def _lookup_ms(children: dict[str, _LookupChild], exact_qs: list[str], semantic_qs: list[str],
               n: int) -> dict[str, dict[str, list[float]]]:  # fmt: skip
    """The cache stage alone, per checkout: exact probe (+ embedding + search + guard) per outcome,
    in blocks of ``_BLOCK`` rounds alternating between the checkouts' processes (which goes first
    alternating too), then each step timed alone (blocks alternating likewise). Run only once the
    gateways are up, pinned and idle: while they load, their graph builds run on every core, and
    lookups timed beside them measured the builds' CPU and memory-bandwidth contention instead (the
    issue's goal is on an idle core)."""
    order = list(children)
    blocks = [range(b, min(b + _BLOCK, n)) for b in range(0, n, _BLOCK)]
    for j, block in enumerate(blocks):
        for name in order if j % 2 == 0 else order[::-1]:
            for i in block:
                for kind, q in (("exact", exact_qs[i % len(exact_qs)]), ("semantic", semantic_qs[i % len(semantic_qs)]),
                                ("miss", f"Is there parking near the venue for event number {i} this evening?")):
                    children[name].ask(kind, q)
    for j, block in enumerate(blocks):
        for name in order if j % 2 == 0 else order[::-1]:
            for i in block:
                children[name].ask("stages", i)
    return {name: json.loads(child.ask("end")) for name, child in children.items()}


def _timed(fn: Callable[[list[str]], object], arg: list[str]) -> float:
    t0 = time.perf_counter()
    fn(arg)
    return time.perf_counter() - t0


def _stamp(into: list[float]) -> None:
    into.append(time.perf_counter())


_STAGES = ("keys", "exact probe", "embed (batcher)", "embed (direct)", "search", "guard")


async def _stages(cache: ResponseCache, encoder: OnnxEncoder, semantic_qs: list[str], rounds: range,
                  out: dict[str, list[float]]) -> None:
    """Each step of ``ResponseCache.lookup`` timed on its own (``stage|outcome`` -> ms), so the
    breakdown adds up to the lookup: key building, exact probe, the embedding through the worker
    thread and called directly (the hand-off's cost), the nearest-neighbour search, the hit guard."""
    matcher, store = cache.matcher, cache.store
    assert matcher is not None
    for i in rounds:
        for kind, q in (("semantic", semantic_qs[i % len(semantic_qs)]),
                        ("miss", f"Is there parking near the venue for event number {i} this evening?")):
            req, steps = _request(q), []
            c0 = time.perf_counter()
            context, query = keys.split_query(req)
            ns, key = keys.namespace("default", req, context), keys.exact_key("default", req)
            steps.append(time.perf_counter() - c0)
            c0 = time.perf_counter()
            await store.get_exact(ns, key)
            steps.append(time.perf_counter() - c0)
            # The second of two embeddings in a row finds the model's weights warm in the CPU caches
            # (a direct call right after the batched one measured ~0.3 ms less): alternate the order.
            direct = _timed(encoder.counted, [query]) if i % 2 else 0.0
            c0 = time.perf_counter()
            vec = await matcher.embed(query)
            steps.append(time.perf_counter() - c0)
            steps.append(direct if i % 2 else _timed(encoder.counted, [query]))
            c0 = time.perf_counter()
            cands = await store.nearest(ns, vec, 4)
            steps.append(time.perf_counter() - c0)
            c0 = time.perf_counter()
            for score, cand in cands:
                if matcher.accept(query, cand.query, score):
                    break
            steps.append(time.perf_counter() - c0)
            for name, secs in zip(_STAGES, steps, strict=True):
                out.setdefault(f"{name}|{kind}", []).append(secs * 1000)


class _RawClient:
    """One keep-alive HTTP/1.1 connection driven with a plain socket. httpx spends ~0.3-0.5 ms of
    its own per streamed request, which would be counted as the server's latency here."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.head = "POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"

    def stream(self, body: bytes) -> tuple[bytes, bytes]:
        """(response head, body bytes incl. chunk framing) once the last byte arrived."""
        self.sock.sendall(f"{self.head}content-length: {len(body)}\r\n\r\n".encode() + body)
        buf = b""
        while b"\r\n\r\n" not in buf:
            buf += self._recv()
        head, _, rest = buf.partition(b"\r\n\r\n")
        lower = head.lower()
        if b"transfer-encoding: chunked" in lower:
            while not rest.endswith(b"\r\n0\r\n\r\n") and rest != b"0\r\n\r\n":
                rest += self._recv()
        else:
            length = int(lower.split(b"content-length: ", 1)[1].split(b"\r\n", 1)[0])
            while len(rest) < length:
                rest += self._recv()
        return head, rest

    def _recv(self) -> bytes:
        data = self.sock.recv(65536)
        if not data:
            raise RuntimeError("the server closed the connection")
        return data

    def close(self) -> None:
        self.sock.close()


def _stream_ms(client: _RawClient, question: str, user: str | None = None) -> tuple[float, str]:
    body = json.dumps(_body(question, user)).encode()
    t0 = time.perf_counter()
    head, _ = client.stream(body)
    ms = (time.perf_counter() - t0) * 1000
    outcome = "?"
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"x-blink-cache:"):
            outcome = line.split(b":", 1)[1].strip().decode()
    return ms, outcome


def _unseen(traps: list[str], i: int) -> str:
    """The i-th never-cached question (a short marker once the traps are used up: each is cached
    after its first miss)."""
    q = traps[i % len(traps)]
    return q if i < len(traps) else f"{q} (take {i // len(traps) + 1})"


def _pin_all_threads(pid: int, core: int) -> None:
    """Every thread of ``pid`` onto ``core`` (sched_setaffinity on a pid moves its main thread only;
    threads started later inherit their creator's set)."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            os.sched_setaffinity(int(tid), {core})
        except ProcessLookupError:
            pass  # a thread that ended meanwhile


def _ratio(a: float, b: float) -> str:
    """``a / b`` as ``1.23x``; ``n/a`` where ``b`` is zero (a --quick run's CPU times can be)."""
    return f"{a / b:.2f}x" if b else "n/a"


def _pct(xs: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(xs), q))


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--lookup-child":
        _lookup_child(sys.argv[2])
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--entries", type=int, default=100_000)
    ap.add_argument("--requests", type=int, default=300)
    ap.add_argument("--onnx-dir", default="~/.blink/onnx")
    ap.add_argument("--head-start", action="store_true",
                    help="also a gateway with cache.semantic.head_start on, requests alternating with the default one's")
    ap.add_argument("--before", type=Path, help="a checkout of an earlier commit (git worktree add DIR SHA): its "
                    "gateway serves a copy of the same cache, requests alternating with this checkout's")
    ap.add_argument("--quick", action="store_true", help="a short run that proves the script works (no figures)")
    args = ap.parse_args()
    if args.quick:
        args.entries, args.requests = min(args.entries, 2_000), min(args.requests, 20)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    tmp = Path(tempfile.mkdtemp(prefix="blink-cache-bench-"))
    settings = bench_settings(tmp, args.onnx_dir, args.entries)
    pairs = load_pairs()
    t0 = time.perf_counter()
    exact_qs, semantic_qs = asyncio.run(_fill(settings, pairs, args.entries))
    # Misses are real unseen questions: the trap halves of the pairs, which the guard must refuse.
    asked = {" ".join(p["a"].lower().split()) for p in pairs}
    traps = [p["b"] for p in pairs if not p["same_answer"] and " ".join(p["b"].lower().split()) not in asked]
    print(f"filled {len(exact_qs)} questions + {args.entries} filler entries in {time.perf_counter() - t0:.1f} s; "
          f"{len(semantic_qs)} guarded paraphrases")

    cores = os.sched_getaffinity(0)
    server_core, client_core = (sorted(cores)[-1], sorted(cores)[0]) if len(cores) > 1 else (None, None)
    up_port = free_port()
    env = dict(os.environ, BLINK_CACHE__MAX_ENTRIES=str(settings.max_entries),
               BLINK_CACHE__SEMANTIC__ONNX_DIR=args.onnx_dir, BLINK_OBS__REQUEST_LOG="off")
    # name -> (checkout, cache file): the "before" gateway gets its own copy of the filled file.
    gateways = {"now": (ROOT, Path(settings.path))}
    if args.head_start:
        shutil.copy(settings.path, tmp / "head-start.db")
        gateways["head start"] = (ROOT, tmp / "head-start.db")
    if args.before is not None:
        shutil.copy(settings.path, tmp / "before.db")
        gateways["before"] = (args.before.resolve(), tmp / "before.db")
    procs: list[subprocess.Popen[bytes]] = []
    ports: dict[str, int] = {}
    kinds = ("exact", "semantic", "miss", "slow miss") if args.head_start else ("exact", "semantic", "miss")
    results: dict[str, dict[str, list[float]]] = {g: {k: [] for k in kinds} for g in gateways}
    cpu_ms: dict[str, dict[str, float]] = {g: {} for g in gateways}
    try:
        procs.append(subprocess.Popen([sys.executable, str(ROOT / "tests" / "upstream_server.py"), "--port", str(up_port),
                                       "--tokens", "32"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        wait_ready(f"http://127.0.0.1:{up_port}/v1/models", procs[-1], timeout=300)
        for name, (checkout, path) in gateways.items():  # `python -m` from a checkout imports its blink
            ports[name] = free_port()
            extra = {"BLINK_CACHE__SEMANTIC__HEAD_START": "true"} if name == "head start" else {}
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "blink.cli", "serve", "--upstream", f"http://127.0.0.1:{up_port}/v1",
                 "--upstream-model", MODEL, "--port", str(ports[name]), "--semantic-cache", "--log-level", "warning"],
                cwd=checkout, env=dict(env, BLINK_CACHE__PATH=str(path), **extra), stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL))
        servers = {name: psutil.Process(p.pid) for name, p in zip(gateways, procs[1:], strict=True)}

        # The cache stage alone, in a process per checkout ("now", and "before" with --before): each
        # loads the same file and builds its graph while the gateways build theirs (the 100k-row
        # builds overlap); their lookups are timed once the gateways are ready, pinned and idle.
        spec = tmp / "lookup.json"
        # Only what differs from the defaults: an older checkout refuses fields it does not know yet.
        spec.write_text(json.dumps({"settings": settings.model_dump(mode="json", exclude_defaults=True),
                                    "semantic": semantic_qs}))
        children = {name: _LookupChild(gateways[name][0], spec) for name in ("now", "before") if name in gateways}
        for name, p in zip(gateways, procs[1:], strict=True):
            wait_ready(f"http://127.0.0.1:{ports[name]}/health", p, timeout=900)
            print(f"gateway {name!r} ready {time.perf_counter() - t0:.0f} s into the run")
            if server_core is not None:
                _pin_all_threads(p.pid, server_core)
        for child in children.values():
            child.wait_ready()
            if client_core is not None:
                _pin_all_threads(child.proc.pid, client_core)
        print(f"lookup processes ready {time.perf_counter() - t0:.0f} s into the run")
        if client_core is not None:
            os.sched_setaffinity(0, {client_core})
        try:
            lookups = _lookup_ms(children, exact_qs, semantic_qs, args.requests)
        finally:
            for child in children.values():
                child.stop()
        clients = {name: _RawClient(port) for name, port in ports.items()}
        try:
            # Keep the paraphrases every gateway serves semantically (some equal a question after
            # normalising; an earlier checkout's embedder may place a few differently).
            semantic_qs = [q for q in semantic_qs if all(_stream_ms(c, q)[1] == "semantic" for c in clients.values())]
            order = list(gateways)
            for kind in kinds:
                cpu0 = {g: sum(servers[g].cpu_times()[:2]) for g in gateways}
                for i in range(args.requests):
                    q = {"exact": exact_qs[i % len(exact_qs)], "semantic": semantic_qs[i % len(semantic_qs)],
                         "miss": _unseen(traps, i), "slow miss": _unseen(traps, args.requests + i)}[kind]
                    user = SLOW_UPSTREAM if kind == "slow miss" else None
                    for g in order if i % 2 == 0 else order[::-1]:  # alternate which gateway goes first
                        ms, outcome = _stream_ms(clients[g], q, user)
                        expected = "miss" if kind == "slow miss" else kind
                        if outcome != expected and expected == "miss":
                            continue  # an unseen question that a paraphrase filled earlier answers: rightly a hit
                        if outcome != expected:
                            raise RuntimeError(f"{g}: expected {kind}, got {outcome} for {q!r}")
                        results[g][kind].append(ms)
                # Server CPU per request: what the request costs on an idle core, whatever else runs.
                for g in gateways:
                    cpu_ms[g][kind] = (sum(servers[g].cpu_times()[:2]) - cpu0[g]) * 1000 / args.requests
        finally:
            for c in clients.values():
                c.close()
    finally:
        for p in reversed(procs):
            p.terminate()
            p.wait(timeout=30)
        shutil.rmtree(tmp, ignore_errors=True)

    miss = results["now"]["miss"]
    print(f"\nend to end, streaming, {args.requests} requests each, {args.entries} entries "
          f"(server on core {server_core}, client on core {client_core}; the machine may be shared):")
    for kind, goal in (("exact", 1.0), ("semantic", 5.0), ("miss", None)):
        xs = results["now"][kind]
        ratio = f"  p50 {_ratio(_pct(xs, 50), _pct(miss, 50))} / p99 {_ratio(_pct(xs, 99), _pct(miss, 99))} of a miss" \
            if kind != "miss" else "  (baseline: the instant test upstream behind the gateway)"
        goal_s = f"  goal p99 <= {goal:g} ms" if goal else ""
        print(f"  {kind:<9} p50 {_pct(xs, 50):6.2f} ms  p99 {_pct(xs, 99):6.2f} ms  server CPU {cpu_ms['now'][kind]:5.2f} ms/req"
              f"{ratio}{goal_s}")
    if args.head_start:
        print("\nhead start (cache.semantic.head_start) vs off, requests alternating between the two gateways:")
        for kind in ("semantic", "miss", "slow miss"):
            a, b = results["head start"][kind], results["now"][kind]
            print(f"  {kind:<9} p50 {_pct(a, 50):6.2f} vs {_pct(b, 50):6.2f} ms ({_ratio(_pct(a, 50), _pct(b, 50))}, "
                  f"{_pct(a, 50) - _pct(b, 50):+.2f} ms)  p99 {_pct(a, 99):6.2f} vs {_pct(b, 99):6.2f} ms "
                  f"({_ratio(_pct(a, 99), _pct(b, 99))})  server CPU {cpu_ms['head start'][kind]:5.2f} vs "
                  f"{cpu_ms['now'][kind]:5.2f} ms/req")
        print(f"  (slow miss: the upstream answers one token after 20 ms ({SLOW_UPSTREAM}); a miss's lookup overlaps\n"
              "  the upstream call, which only pays when the call takes longer than the lookup, as a model's does;\n"
              "  each semantic hit also opened and cut an upstream call)")
    if args.before is not None:
        print(f"\nnow vs before ({args.before}), requests alternating between the two gateways on one core:")
        for kind in ("exact", "semantic", "miss"):
            a, b = results["now"][kind], results["before"][kind]
            print(f"  {kind:<9} p50 {_pct(a, 50):6.2f} vs {_pct(b, 50):6.2f} ms ({_ratio(_pct(a, 50), _pct(b, 50))})  "
                  f"p99 {_pct(a, 99):6.2f} vs {_pct(b, 99):6.2f} ms ({_ratio(_pct(a, 99), _pct(b, 99))})  "
                  f"server CPU {cpu_ms['now'][kind]:5.2f} vs {cpu_ms['before'][kind]:5.2f} ms/req "
                  f"({_ratio(cpu_ms['now'][kind], cpu_ms['before'][kind])})")
    _print_lookups(lookups, args.before)


def _print_lookups(lookups: dict[str, dict[str, list[float]]], before: Path | None) -> None:
    now = lookups["now"]
    old = lookups.get("before")
    print("\ncache stage alone, in process (the request path's cost before the backend / the replay)"
          + (f";\nnow vs before ({before}), {_BLOCK}-round blocks alternating between the two processes on one core:"
             if old else ":"))
    for kind, goal in (("exact", "hit"), ("semantic", "hit"), ("miss", "goal p50 <= 3 ms")):
        xs, cpu = now[kind], now[kind + "_cpu"]
        print(f"  {kind:<9} p50 {_pct(xs, 50):6.2f} ms  p99 {_pct(xs, 99):6.2f} ms  CPU p50 {_pct(cpu, 50):5.2f} ms "
              f"p99 {_pct(cpu, 99):5.2f} ms  ({len(xs)} lookups; {goal})")
        if old:
            ys = old[kind]
            print(f"  {'  before':<9} p50 {_pct(ys, 50):6.2f} ms  p99 {_pct(ys, 99):6.2f} ms  CPU p50 "
                  f"{_pct(old[kind + '_cpu'], 50):5.2f} ms  -> now/before p50 {_ratio(_pct(xs, 50), _pct(ys, 50))}  "
                  f"p99 {_ratio(_pct(xs, 99), _pct(ys, 99))}")
    hs = now["head start"]
    print(f"  miss with cache.semantic.head_start: the backend call opens after p50 {_pct(hs, 50):6.3f} ms  "
          f"p99 {_pct(hs, 99):6.3f} ms (keys + exact probe; the embedding and search overlap the call)")
    print("\nits steps, each timed alone (ms, p50 / p99; the lookup hands the embedding to the batcher's thread;\n"
          "'direct' calls the same encoder on the loop's thread, which of the two runs first alternating):")
    cols = [("now", "semantic hit", "semantic"), ("now", "miss", "miss")]
    if old:
        cols += [("before", "miss, before", "miss")]
    print(f"  {'step':<20} " + " ".join(f"{title:>16}" for _, title, _ in cols))
    for name in _STAGES:
        cells = [f"{_pct(lookups[who][f'{name}|{k}'], 50):6.3f} / {_pct(lookups[who][f'{name}|{k}'], 99):6.3f}"
                 for who, _, k in cols]
        print(f"  {name:<20} " + " ".join(f"{c:>16}" for c in cells))

if __name__ == "__main__":
    from _proc import cpu_line

    if sys.argv[1:2] != ["--lookup-child"]:  # a child's stdout is its protocol with the parent
        print(cpu_line(), flush=True)
    main()
