"""The Batch API as one app service: store + runner + routes, started and stopped with the app."""

from __future__ import annotations

from blink.config.batch import BatchSettings
from blink.gateway.batch.executor import LineExecutor
from blink.gateway.batch.routes import build_batch_router
from blink.gateway.batch.runner import BatchRunner, LineRetry
from blink.gateway.batch.store import BatchStore, postgres_batch_store, sqlite_batch_store
from blink.gateway.batch.sweeper import FileSweeper
from blink.gateway.http.dispatch import Routes

# Boundaries, part headers and the small form fields of an upload: a few hundred bytes in
# practice; 64 KiB leaves room for long file names without letting a body grow unbounded.
_MULTIPART_OVERHEAD = 64 * 1024


class BatchService:
    def __init__(self, store: BatchStore, runner: BatchRunner, settings: BatchSettings) -> None:
        self.store = store
        self.runner = runner
        self.router: Routes = build_batch_router(store, runner, settings)
        self.sweeper = FileSweeper(store, settings.sweep_interval_s)
        # Uploads may exceed the server's per-request body limit (OpenAI allows 200 MB files); the
        # multipart framing around the file is allowed on top. An upload whose content-length is
        # over this is refused (413) before a byte of it is read; the route checks the file exactly.
        self.body_limits = {"/v1/files": settings.max_file_bytes + _MULTIPART_OVERHEAD}

    async def start(self) -> None:
        await self.store.start()
        await self.runner.start()
        await self.sweeper.start()

    async def aclose(self) -> None:
        await self.sweeper.aclose()
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
    runner = BatchRunner(store, execute, settings.max_concurrency, LineRetry(total_s=settings.line_retry_s),
                         settings.file_retention_s)
    return BatchService(store, runner, settings)
