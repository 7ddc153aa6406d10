"""Run an ASGI app under uvicorn (uvloop + httptools) in a background thread on a free port."""

from __future__ import annotations

import socket
import threading
import time
from types import TracebackType
from typing import Any

import uvicorn


class LiveServer:
    def __init__(self, app: Any, lifespan: str = "on", http: Any = "httptools") -> None:
        self._config = uvicorn.Config(
            app, loop="uvloop", http=http, lifespan=lifespan, log_level="warning", access_log=False
        )
        self._server = uvicorn.Server(self._config)
        self._thread: threading.Thread | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> LiveServer:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [sock]}, daemon=True)
        self._thread.start()
        # Start-up includes the lifespan: an embedded engine's process (torch import, model load,
        # kernel libraries) takes 5-10 s idle and over 20 s on a loaded 2-core machine. A wait,
        # not a timing goal: a thread that dies fails at once.
        deadline = time.monotonic() + 120
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("server did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=15)

    def __enter__(self) -> LiveServer:
        return self.start()

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()
