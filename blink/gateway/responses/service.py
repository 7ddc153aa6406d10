"""The Responses API as one app service: its store and routes, started and stopped with the app."""

from __future__ import annotations

from blink.config.responses import ResponsesSettings
from blink.config.server import ServerSettings
from blink.gateway.http.dispatch import Routes
from blink.gateway.responses.routes import build_responses_router
from blink.gateway.responses.store import ResponseStore, postgres_response_store, sqlite_response_store
from blink.gateway.responses.write_behind import WriteBehindResponseStore


class ResponsesService:
    def __init__(self, store: ResponseStore, settings: ResponsesSettings, server: ServerSettings) -> None:
        self.store = store
        self.router: Routes = build_responses_router(store, settings, server)
        self.body_limits: dict[str, int] = {}

    async def start(self) -> None:
        await self.store.start()

    async def aclose(self) -> None:
        await self.store.aclose()


def build_response_store(settings: ResponsesSettings) -> ResponseStore:
    if settings.store == "postgres":
        if not settings.postgres_dsn:
            raise ValueError("responses.store 'postgres' needs responses.postgres_dsn")
        db = postgres_response_store(settings.postgres_dsn)
    else:
        db = sqlite_response_store(settings.path)
    return WriteBehindResponseStore(db, settings.flush_interval_s())


def build_responses_service(settings: ResponsesSettings, server: ServerSettings) -> ResponsesService:
    return ResponsesService(build_response_store(settings), settings, server)
