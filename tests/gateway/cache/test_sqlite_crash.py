"""kill -9 while the SQLite store is writing: nothing acknowledged is lost, the file is sound."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

from blink.gateway.cache.stores.sqlite import SQLiteCacheStore

_WRITER = textwrap.dedent(
    """
    import asyncio, sys
    import numpy as np
    from blink.gateway.cache.entry import CachedChoice, CachedResponse
    from blink.gateway.cache.stores.sqlite import SQLiteCacheStore

    async def main():
        store = SQLiteCacheStore(sys.argv[1])
        await store.start()
        i = 0
        while True:
            vec = np.ones(8, dtype=np.float32) / np.sqrt(8)
            await store.put("ns", b"k%d" % i, vec, CachedResponse("chat", [CachedChoice("x" * 2000, "stop")]), 3600)
            print(i, flush=True)  # acknowledged: put() returned
            i += 1

    asyncio.run(main())
    """
)


async def test_acknowledged_writes_survive_kill_9(tmp_path: Path) -> None:
    path = tmp_path / "cache.db"
    proc = subprocess.Popen([sys.executable, "-c", _WRITER, str(path)], stdout=subprocess.PIPE, text=True)
    acked: list[int] = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            acked.append(int(line))
            if len(acked) >= 300:
                break
    finally:
        os.kill(proc.pid, signal.SIGKILL)  # mid-write: the writer never stops between puts
        proc.wait(timeout=10)
    assert len(acked) >= 300
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    store = SQLiteCacheStore(path)
    await store.start()
    try:
        missing = [i for i in acked if await store.get_exact("ns", b"k%d" % i) is None]
        assert missing == []
    finally:
        await store.aclose()
