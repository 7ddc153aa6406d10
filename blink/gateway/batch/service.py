"""The Batch API as one app service: store + runner + routes, started and stopped with the app."""

from __future__ import annotations

from fastapi import APIRouter

from blink.gateway.batch.executor import LineExecutor
from blink.gateway.batch.routes import build_batch_router
from blink.gateway.batch.runner import BatchRunner
from blink.gateway.batch.store import BatchStore, postgres_batch_store, sqlite_batch_store
from blink.throughput_config import BatchSettings


class BatchService:
    def __init__(self, store: BatchStore, runner: BatchRunner, settings: BatchSettings) -> None:
        self.store = store
        self.runner = runner
        self.router: APIRouter = build_batch_router(store, runner, settings)
        # Uploads may exceed the server's per-request body limit (OpenAI allows 200 MB files).
        self.body_limits = {"/v1/files": settings.max_file_bytes}

    async def start(self) -> None:
        await self.store.start()
        await self.runner.start()

    async def aclose(self) -> None:
        await self.runner.aclose()
        await self.store.aclose()


def build_batch_store(settings: BatchSettings) -> BatchStore:
    if settings.store == "postgres":
        if not settings.postgres_dsn:
            raise ValueError("batch.store 'postgres' needs batch.postgres_dsn")
        return postgres_batch_store(settings.postgres_dsn)
    return sqlite_batch_store(settings.path)


def build_batch_service(settings: BatchSettings, execute: LineExecutor) -> BatchService:
    """``execute``: runs one line (the generation pipeline's ``PipelineLineExecutor``)."""
    store = build_batch_store(settings)
    return BatchService(store, BatchRunner(store, execute, settings.max_concurrency), settings)
